#!/usr/bin/env bash
# Seed 002's NCCL half on a GPU machine: two containers, one GPU
# each, each given NVIDIA's real CDI spec (nvidia-ctk cdi generate, there)
# and ours for the seed002 fixture node (one HCA each, as the seed's
# `rdma/hca: 1`), started by a static runc. In them, the machine's own
# PyTorch runs torch.distributed with the NCCL backend and all-reduces
# across the two containers, with the env the seed's pods have
# (NCCL_DEBUG=INFO, NCCL_IB_DISABLE=0, IPC_LOCK) plus what the Kubeflow
# training operator sets (MASTER_ADDR = the master's name, MASTER_PORT=23456,
# WORLD_SIZE=2, RANK). NCCL_IB_HCA, NCCL_IB_GID_INDEX and NCCL_SOCKET_IFNAME
# come from the /etc/nccl.conf our hook writes.
#
#   bash test/device/seed002_nccl.sh prepare # here: gpu_cdi.sh prepare's carry
#                                           # (tools, fixture node, our spec)
#                                           # plus a static busybox
#   bash test/device/seed002_nccl.sh run    # on the device machine, as root,
#                                           # with _out/gpu-run/carry carried
#
# The containers' root is the machine's own root as an overlay's lower layer
# (its Python, PyTorch and NCCL, untouched; what the hooks write lands in a
# tmpfs upper layer). Each container has a network namespace of its own,
# joined to the other's by a veth pair, holding the address of its fixture
# HCA's GID table (mlx5_1: 25.11.128.2, mlx5_2: 25.11.128.34), so our hook
# computes NCCL_IB_GID_INDEX for it. The HCAs are fixture nodes: NCCL finds
# no IB device and uses its socket transport over the veth.
# docs/gpu-device-run.md ("Seed 002's NCCL half") has a run's output.
# NO_GPU=1 leaves NVIDIA and PyTorch out: the containers print their
# /etc/nccl.conf and exit (a dry run of the rest on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."

R=/opt/rdma-cdi-gpu # where gpu_cdi.sh prepare put the fixture node and the hook
CARRY=${CARRY:-_out/gpu-run/carry}
VENDOR=rdma.example.com
SPEC_DIR=${SPEC_DIR:-/var/run/cdi}
W=/tmp/seed002-nccl
NSD=/run/seed002-netns # the two network namespaces, bind-mounted files
PORT=23456
NAMES=(seed002-master-0 seed002-worker-0)
HCAS=(mlx5_1 mlx5_2)
ADDRS=(25.11.128.2 25.11.128.34)

# The program each container runs: the machine's PyTorch, NCCL backend.
read -r -d '' ALLREDUCE <<'PY'
import datetime, os, socket, sys
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
p = f"[{socket.gethostname()} rank {rank}]"
print(p, "NCCL_* in the process env:", " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")))
# NCCL reads ~/.nccl.conf (or $NCCL_CONF_FILE) first, then /etc/nccl.conf;
# a key set earlier (the process env first of all) is kept.
for f in (os.environ.get("NCCL_CONF_FILE") or os.path.expanduser("~/.nccl.conf"), "/etc/nccl.conf"):
    try:
        print(p, f + ":", open(f).read().strip().replace("\n", " | "))
    except OSError as e:
        print(p, f + ": none:", e.strerror)
print(p, "torch", torch.__version__, "cuda devices", torch.cuda.device_count(), torch.cuda.get_device_name(0), flush=True)
dist.init_process_group("nccl", init_method="env://", timeout=datetime.timedelta(seconds=120))
torch.cuda.set_device(0)
t = torch.full((1 << 20,), float(rank + 1), device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
got, want = t[0].item(), world * (world + 1) / 2
ok = bool((t == want).all().item())
print(p, f"rank {rank}/{world} nccl {'.'.join(map(str, torch.cuda.nccl.version()))} allreduce sum {got:g} over {t.numel()} floats",
      "ok" if ok else f"WRONG, want {want:g}", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
PY

cleanup() {
	local i
	for i in 0 1; do
		runc --root /run/seed002-runc delete -f "${NAMES[$i]}" >/dev/null 2>&1
		umount "$W/c$i/rootfs" 2>/dev/null
		umount "$NSD/$i" 2>/dev/null && rm -f "$NSD/$i"
	done
	umount "$NSD" 2>/dev/null
	umount "$W" 2>/dev/null
}

run() {
	local out=${OUT:-/tmp/seed002-nccl-out} i b ngpu gpus py
	mkdir -p "$out"
	[ "$(id -u)" -eq 0 ] || { echo "seed002_nccl: run as root" >&2; return 1; }
	echo "## device: $(uname -r) $(. /etc/os-release; echo "$PRETTY_NAME"), root fs $(findmnt -no FSTYPE /)"
	if [ -z "${NO_GPU:-}" ]; then
		nvidia-smi -L
		ngpu=$(nvidia-smi -L | grep -c '^GPU ')
		py=$(command -v python3)
		echo "python: $py; $("$py" -c 'import torch; print("torch", torch.__version__, "at", torch.__file__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -n1)"
	else
		ngpu=2
	fi
	echo "host rdma-core: $(ls /usr/lib/x86_64-linux-gnu/libibverbs.so.1.* 2>/dev/null | xargs -r -n1 basename); /sys/class/infiniband: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"
	for f in /etc/nccl.conf /root/.nccl.conf; do
		echo "host $f: $([ -e $f ] && { echo "present:"; sed 's/^/    /' $f; } || echo none)"
	done
	gpus=(0 1)
	if [ "$ngpu" -lt 2 ]; then
		gpus=(0 0)
		echo "ONE GPU ONLY: both containers get nvidia.com/gpu=0 (two processes on one GPU)"
	fi

	# Our side as gpu_cdi.sh run sets it up: the fixture node and the hook
	# where our spec names them, the tools beside them.
	cleanup
	rm -rf "$R" && mkdir -p "$R/log" && tar -C / -xzf "$CARRY/node.tar.gz" && mkdir -p "$R/bin"
	install -m 0755 "$CARRY"/bin/* "$R/bin/"
	export PATH=$R/bin:$PATH
	nvidia-ctk --version | head -n1; runc --version | head -n1
	mkdir -p "$SPEC_DIR" && rm -f "$SPEC_DIR/nvidia.yaml" "$SPEC_DIR/$VENDOR-hca.json"
	cp "$CARRY/cdi/$VENDOR-hca.json" "$SPEC_DIR/"
	local gpudev=()
	if [ -z "${NO_GPU:-}" ]; then
		nvidia-ctk cdi generate --nvidia-cdi-hook-path="$R/bin/nvidia-cdi-hook" --output="$SPEC_DIR/nvidia.yaml" 2>&1 | tail -n2
		nvidia-ctk cdi list 2>/dev/null | tr '\n' ' '; echo
	fi

	# Two network namespaces joined by a veth pair: eth0 in each, with the
	# address of its HCA's GID table and a default route (our hook makes
	# NCCL_SOCKET_IFNAME the default-route netdev). The device machine has
	# no iproute2: busybox's ip (carried) and util-linux's unshare/nsenter.
	mkdir -p "$NSD"
	mountpoint -q "$NSD" || { mount --bind "$NSD" "$NSD" && mount --make-private "$NSD"; }
	for i in 0 1; do
		touch "$NSD/$i" && unshare --net="$NSD/$i" true || return 1
	done
	nsenter --net="$NSD/0" busybox ip link add eth0 type veth || return 1
	local peer holder
	peer=$(nsenter --net="$NSD/0" busybox ip -o link show eth0 | sed -E 's/^[0-9]+: eth0@([^:]+):.*/\1/')
	nsenter --net="$NSD/1" sleep 60 &
	holder=$!
	sleep 0.5
	nsenter --net="$NSD/0" busybox ip link set "$peer" netns "$holder" &&
		nsenter --net="$NSD/1" busybox ip link set "$peer" name eth0 || return 1
	kill "$holder" 2>/dev/null
	for i in 0 1; do
		nsenter --net="$NSD/$i" sh -c "busybox ip addr add ${ADDRS[$i]}/24 dev eth0 && busybox ip link set lo up &&
			busybox ip link set eth0 up && busybox ip route add default dev eth0" || return 1
		echo "netns $NSD/$i: $(nsenter --net="$NSD/$i" busybox ip -o -4 addr show eth0 | awk '{print $2, $4}'), default via $(nsenter --net="$NSD/$i" busybox ip route | awk '/^default/{print $3}')"
	done
	nsenter --net="$NSD/0" busybox ping -c 1 -W 2 "${ADDRS[1]}" | grep -E 'transmitted'

	mkdir -p "$W" && mount -t tmpfs -o size=4g tmpfs "$W"
	for i in 0 1; do
		b=$W/c$i
		mkdir -p "$b/upper" "$b/work" "$b/rootfs"
		mount -t overlay overlay -o "lowerdir=/,upperdir=$b/upper,workdir=$b/work" "$b/rootfs" || return 1
		rm -f "$b/rootfs/etc/nccl.conf" # the machine's own, if any: the image has none
		mkdir -p "$b/rootfs/seed002"
		printf '%s\n' "$ALLREDUCE" >"$b/rootfs/seed002/allreduce.py"
		# The training operator's Services, as DNS would give them.
		printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "${ADDRS[0]}" "${NAMES[0]}" "${ADDRS[1]}" "${NAMES[1]}" >"$b/rootfs/etc/hosts"
		(cd "$b" && runc spec)
		NSD=$NSD SEED_PY=${py:-python3} python3 - "$b/config.json" "$i" "${NAMES[$i]}" "${NAMES[0]}" "$PORT" <<'PY'
import json, os, sys
p, rank, name, master, port = sys.argv[1:6]
c = json.load(open(p))
c["hostname"] = name
c["root"]["readonly"] = False
pr = c["process"]
pr["terminal"] = False
pr["cwd"] = "/"
pr["args"] = [os.environ.get("SEED_PY", "python3"), "/seed002/allreduce.py"]
if os.environ.get("NO_GPU"):
    pr["args"] = ["/bin/sh", "-c", "echo nccl.conf: $(cat /etc/nccl.conf | tr '\\n' '|'); grep CapEff /proc/self/status; ip -br addr 2>/dev/null; ulimit -l"]
env = ["PATH=" + os.environ.get("ORIG_PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), "HOME=/root",
       # the seed's pod env
       "NCCL_DEBUG=INFO", "NCCL_IB_DISABLE=0",
       # what the training operator sets
       "MASTER_ADDR=" + master, "MASTER_PORT=" + port, "WORLD_SIZE=2", "RANK=" + rank, "PYTHONUNBUFFERED=1"]
if os.environ.get("LD_LIBRARY_PATH"):
    env.append("LD_LIBRARY_PATH=" + os.environ["LD_LIBRARY_PATH"])
pr["env"] = env
for k in ("bounding", "effective", "permitted"):  # the seed's securityContext: IPC_LOCK
    pr["capabilities"].setdefault(k, []).append("CAP_IPC_LOCK")
for m in c["mounts"]:
    if m["destination"] == "/dev/shm":
        m["options"] = [o for o in m["options"] if not o.startswith("size=")] + ["size=1g"]
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"] + \
    [{"type": "network", "path": os.environ["NSD"] + "/" + rank}]
json.dump(c, open(p, "w"), indent=1)
PY
		gpudev=("nvidia.com/gpu=${gpus[$i]}")
		[ -z "${NO_GPU:-}" ] || gpudev=()
		echo "## cdiapply ${NAMES[$i]}: ${gpudev[*]} $VENDOR/hca=${HCAS[$i]}"
		cdiapply -spec-dir "$SPEC_DIR" -config "$b/config.json" "${gpudev[@]}" "$VENDOR/hca=${HCAS[$i]}"
		cp "$b/config.json" "$out/config-$i.json"
	done

	echo "## runc run, both at once"
	local pids=()
	for i in 0 1; do
		timeout 240 runc --root /run/seed002-runc run --bundle "$W/c$i" "${NAMES[$i]}" </dev/null >"$out/container-$i.log" 2>&1 &
		pids+=($!)
	done
	local rc=()
	for i in 0 1; do
		wait "${pids[$i]}"
		rc+=($?)
	done
	for i in 0 1; do
		echo "---------------- ${NAMES[$i]} (runc rc=${rc[$i]})"
		cat "$out/container-$i.log"
		echo "--- what the hooks wrote: /etc/nccl.conf"
		cat "$W/c$i/upper/etc/nccl.conf" 2>&1
	done
	echo "--- our hook log"; cat "$R/log/hooks.log" 2>&1

	echo "## summary"
	{
		for i in 0 1; do
			echo "${NAMES[$i]} (nvidia.com/gpu=${gpus[$i]}, $VENDOR/hca=${HCAS[$i]}): runc rc=${rc[$i]}"
			grep -h "allreduce sum" "$out/container-$i.log"
			grep -hE "NCCL_[A-Z_]+ set|nccl.conf:|NET/IB|NET/Socket|Using network|NCCL version|via NET|Channel 00" "$out/container-$i.log" |
				sed -E 's/^[^ ]+:[0-9]+:[0-9]+ //' | sort | uniq -c
		done
	} | tee "$out/summary"
	cleanup
	cp "$SPEC_DIR/nvidia.yaml" "$out/" 2>/dev/null
	rm -f "$SPEC_DIR/nvidia.yaml" "$SPEC_DIR/$VENDOR-hca.json"
}

# prepare: gpu_cdi.sh's carry, plus busybox (its ip: the device machine
# has no iproute2).
prepare() {
	bash test/device/gpu_cdi.sh prepare || return 1
	install -m 0755 /bin/busybox "$CARRY/bin/busybox"
	file "$CARRY/bin/busybox" | grep -q 'statically linked' || { echo "seed002_nccl: /bin/busybox is not static" >&2; return 1; }
	du -sh "$CARRY"
}

case ${1:-run} in
prepare) prepare ;;
run) export ORIG_PATH=$PATH; mkdir -p "${OUT:-/tmp/seed002-nccl-out}" && run 2>&1 | tee "${OUT:-/tmp/seed002-nccl-out}/seed002-nccl.log" ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
