#!/usr/bin/env bash
# Issue 51 on a GPU machine: does the NCCL in a container started through
# our CDI spec load the host's NCCL net and tuner plugins our hook lends,
# keep an image's own, stay on its defaults when the container opts out,
# and read the topology file the host's /etc/nccl.conf names?
#
#   NCCL_SRC=DIR bash test/device/nccl_plugins.sh prepare
#       here: gpu_cdi.sh prepare's carry (tools, fixture node, our spec),
#       plus stub plugins built by gcc from NCCL's own examples
#       (ext-net/example, ext-tuner/example) at NCCL_REF (v2.28.9-1) of
#       DIR, a git clone of github.com/NVIDIA/nccl (a bare one will do)
#   bash test/device/nccl_plugins.sh run
#       on the device machine, as root, with _out/gpu-run/carry carried
#
# The stubs are NCCL's example plugins as NCCL ships them: the net plugin
# reports no device (NCCL loads it, finds nothing, and falls back to its
# internal IB and socket transports), the tuner leaves NCCL's choice as it
# is. Four containers, each one rank with the GPU (NCCL init and one
# all_reduce), their root the machine's own / as an overlay's lower layer,
# as seed002_nccl.sh does, with /opt/rdma-cdi-gpu (the host's plugin dir
# and topology file), /etc/nccl.conf and ~/.nccl.conf hidden:
#   lent      the image has no NCCL plugin: ours are lent
#   own       the image carries its own stubs (default names, found through
#             LD_LIBRARY_PATH): ours are not lent
#   none-ann  annotation rdma.example.com/nccl-plugins: none
#   none-env  RDMA_CDI_NCCL_PLUGINS=none in the process env
# The topology file is NCCL's own dump of this machine (NCCL_TOPO_DUMP_FILE,
# one rank on the host), named by NCCL_TOPO_FILE in the host's
# /etc/nccl.conf for the run, restored after.
# NO_GPU=1 leaves NVIDIA and PyTorch out: the containers show what the hook
# gave them and exit (a dry run of the rest on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."

R=/opt/rdma-cdi-gpu # gpu_cdi.sh's: the fixture node, the hook, its log
CARRY=${CARRY:-_out/gpu-run/carry}
NCCL_REF=${NCCL_REF:-v2.28.9-1}
VENDOR=rdma.example.com
SPEC_DIR=${SPEC_DIR:-/var/run/cdi}
HOST_CONF=${HOST_CONF:-/etc/nccl.conf}
PLUGDIR=$R/host/nccl-plugins # named in our config's nccl_plugins.dirs
TOPO=$R/host/topo/nccl-topo.xml
OWNDIR=/opt/image-nccl/lib # the "own" image's plugins
W=/tmp/nccl-plugins
NAMES=(lent own none-ann none-env)
SUBSYS=INIT,ENV,NET,GRAPH,TUNING

prepare() {
	set -e
	local src=${NCCL_SRC:-} b=$CARRY/../nccl-src d gd
	[ -n "$src" ] || { echo "nccl_plugins: NCCL_SRC= a git clone of NVIDIA/nccl" >&2; return 1; }
	gd=$(git -C "$src" rev-parse --absolute-git-dir)
	[ -s "$CARRY/node.tar.gz" ] || bash test/device/gpu_cdi.sh prepare
	rm -rf "$b" "$CARRY/nccl-plugins" && mkdir -p "$b" "$CARRY/nccl-plugins/host" "$CARRY/nccl-plugins/image"
	git --git-dir="$gd" archive "$NCCL_REF" ext-net/example ext-tuner/example | tar -x -C "$b"
	echo "NCCL $NCCL_REF ($(git --git-dir="$gd" rev-parse "$NCCL_REF^{commit}")): ext-net/example, ext-tuner/example"
	# As their Makefiles build them (-Inccl -fPIC -shared), each under the
	# name the host offers and under NCCL's default name for the image.
	for d in net tuner; do
		gcc -O2 -Wall -I"$b/ext-$d/example/nccl" -fPIC -shared -Wl,-soname,libnccl-$d-hoststub.so \
			-o "$CARRY/nccl-plugins/host/libnccl-$d-hoststub.so" "$b/ext-$d/example/plugin.c"
		gcc -O2 -Wall -I"$b/ext-$d/example/nccl" -fPIC -shared -Wl,-soname,libnccl-$d.so \
			-o "$CARRY/nccl-plugins/image/libnccl-$d.so" "$b/ext-$d/example/plugin.c"
	done
	for f in "$CARRY"/nccl-plugins/*/*.so; do
		echo "$f: $(nm -D --defined-only "$f" | awk '/ncclNetPlugin_v|ncclTunerPlugin_v/{print $3}' | tr '\n' ' ')"
	done
	du -sh "$CARRY"
}

# What each container runs first (the machine's /bin/sh): what the hook
# gave it, before NCCL looks.
read -r -d '' CHECK <<'SH'
echo "## container $(hostname)"
echo "env: $(env | grep -E '^(NCCL_|RDMA_CDI_|LD_LIBRARY_PATH=)' | sort | tr '\n' ' ')"
echo "/etc/nccl.conf:"; sed 's/^/    /' /etc/nccl.conf 2>&1
echo "~/.nccl.conf: $(cat /root/.nccl.conf 2>&1)"
echo "host plugin dir: $(ls "$PLUGDIR" 2>&1 | tr '\n' ' ')"
echo "topology file: $(ls -l "$TOPO" 2>&1)"
echo "image's own plugin dir: $(ls "$OWNDIR" 2>&1 | tr '\n' ' ')"
echo "mounts: $(awk -v a="$PLUGDIR" -v b="$TOPO" '$5==a||$5==b{print $5, $6}' /proc/self/mountinfo | tr '\n' ';')"
echo "ldconfig -p: $(ldconfig -p | grep -E 'libnccl-(net|tuner)' | tr -s ' \t' ' ' | tr '\n' ';')"
SH

# Then one rank of the machine's PyTorch, NCCL backend.
read -r -d '' ALLREDUCE <<'PY'
import datetime, os, socket
import torch, torch.distributed as dist
p = f"[{socket.gethostname()}]"
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29511", rank=0, world_size=1, timeout=datetime.timedelta(seconds=120))
torch.cuda.set_device(0)
t = torch.full((1 << 20,), 2.0, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print(p, f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))} allreduce sum {t[0].item():g} over {t.numel()} floats",
      "ok" if bool((t == 2.0).all().item()) else "WRONG", flush=True)
for line in sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l and l.split()[-1].startswith("/")}):
    print(p, "mapped:", line)
dist.destroy_process_group()
PY

restore_conf() {
	if [ -e "$W.conf.orig" ]; then cp "$W.conf.orig" "$HOST_CONF" && rm -f "$W.conf.orig"; elif [ -e "$W.conf.none" ]; then rm -f "$HOST_CONF" "$W.conf.none"; fi
}

cleanup() {
	local n
	for n in "${NAMES[@]}"; do
		runc --root /run/nccl-plugins-runc delete -f "$n" >/dev/null 2>&1
		umount "$W/$n/rootfs" 2>/dev/null
	done
	umount "$W" 2>/dev/null
	restore_conf
}

run() {
	local out=${OUT:-/tmp/nccl-plugins-out} n b py rc
	mkdir -p "$out"
	[ "$(id -u)" -eq 0 ] || { echo "nccl_plugins: run as root" >&2; return 1; }
	echo "## device: $(uname -r) $(. /etc/os-release; echo "$PRETTY_NAME"), root fs $(findmnt -no FSTYPE /)"
	py=$(command -v python3)
	if [ -z "${NO_GPU:-}" ]; then
		nvidia-smi -L
		echo "python: $py; $("$py" -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -n1)"
	fi
	for f in "$HOST_CONF" /root/.nccl.conf; do
		echo "host $f: $([ -e $f ] && { echo "present:"; sed 's/^/    /' $f; } || echo none)"
	done
	cleanup
	rm -rf "$R" && mkdir -p "$R/log" && tar -C / -xzf "$CARRY/node.tar.gz" && mkdir -p "$R/bin"
	install -m 0755 "$CARRY"/bin/* "$R/bin/"
	export PATH=$R/bin:$PATH
	runc --version | head -n1
	mkdir -p "$SPEC_DIR" && rm -f "$SPEC_DIR/nvidia.yaml" "$SPEC_DIR/$VENDOR-hca.json"
	cp "$CARRY/cdi/$VENDOR-hca.json" "$SPEC_DIR/"
	local gpudev=()
	if [ -z "${NO_GPU:-}" ]; then
		nvidia-ctk cdi generate --nvidia-cdi-hook-path="$R/bin/nvidia-cdi-hook" --output="$SPEC_DIR/nvidia.yaml" 2>&1 | tail -n1
		gpudev=(nvidia.com/gpu=0)
	fi

	# The host's offer: the stubs in a plugin dir our config names, and a
	# topology file the host's nccl.conf names.
	install -D -m 0755 -t "$PLUGDIR" "$CARRY"/nccl-plugins/host/*.so
	mkdir -p "${TOPO%/*}"
	if [ -z "${NO_GPU:-}" ]; then
		NCCL_TOPO_DUMP_FILE=$TOPO NCCL_DEBUG=WARN "$py" - <<'PY' 2>&1 | tail -n3
import torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29512", rank=0, world_size=1)
torch.cuda.set_device(0)
t = torch.ones(4, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
dist.destroy_process_group()
PY
	fi
	[ -s "$TOPO" ] || printf '<system version="1">\n</system>\n' >"$TOPO"
	echo "topology file $TOPO ($(wc -c <"$TOPO") bytes, NCCL's dump of this machine unless NO_GPU):"
	grep -E '<(system|cpu|pci|gpu|nic|net|nvlink)' "$TOPO" | head -n 12 | sed 's/^/    /'
	if [ -e "$HOST_CONF" ]; then cp "$HOST_CONF" "$W.conf.orig"; else touch "$W.conf.none"; fi
	printf 'NCCL_TOPO_FILE=%s\n' "$TOPO" >>"$HOST_CONF"
	cat >>"$R/node/config.toml" <<EOF

[nccl_plugins]
enabled = true
dirs = ["$PLUGDIR"]
conf_file = "$HOST_CONF"
carry_keys = ["NCCL_TOPO_FILE"]
EOF
	echo "--- our config $R/node/config.toml"; cat "$R/node/config.toml"
	echo "--- the host's $HOST_CONF"; cat "$HOST_CONF"
	echo "--- the host's plugin dir $PLUGDIR: $(ls "$PLUGDIR" | tr '\n' ' ')"

	mkdir -p "$W" && mount -t tmpfs -o size=2g tmpfs "$W"
	for n in "${NAMES[@]}"; do
		b=$W/$n
		mkdir -p "$b/upper" "$b/work" "$b/rootfs"
		mount -t overlay overlay -o "lowerdir=/,upperdir=$b/upper,workdir=$b/work" "$b/rootfs" || return 1
		# An image of its own: none of the host's NCCL set-up in it.
		rm -rf "$b/rootfs$R" "$b/rootfs/etc/nccl.conf" "$b/rootfs/root/.nccl.conf"
		mkdir -p "$b/rootfs/plugtest"
		printf '%s\n' "$ALLREDUCE" >"$b/rootfs/plugtest/allreduce.py"
		if [ "$n" = own ]; then
			install -D -m 0755 -t "$b/rootfs$OWNDIR" "$CARRY"/nccl-plugins/image/*.so
		fi
		(cd "$b" && runc spec)
		CHECK=$CHECK PLUGDIR=$PLUGDIR TOPO=$TOPO OWNDIR=$OWNDIR SUBSYS=$SUBSYS PY=$py python3 - "$b/config.json" "$n" <<'PY'
import json, os, sys
p, name = sys.argv[1:3]
c = json.load(open(p))
c["hostname"] = name
c["root"]["readonly"] = False
pr = c["process"]
pr["terminal"] = False
pr["cwd"] = "/"
run = "" if os.environ.get("NO_GPU") else "exec %s /plugtest/allreduce.py" % os.environ["PY"]
pr["args"] = ["/bin/sh", "-c", os.environ["CHECK"] + "\n" + run]
env = ["PATH=" + os.environ.get("ORIG_PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), "HOME=/root",
       "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=" + os.environ["SUBSYS"], "PYTHONUNBUFFERED=1",
       "PLUGDIR=" + os.environ["PLUGDIR"], "TOPO=" + os.environ["TOPO"], "OWNDIR=" + os.environ["OWNDIR"]]
if name == "own":
    env.append("LD_LIBRARY_PATH=" + os.environ["OWNDIR"])
if name == "none-env":
    env.append("RDMA_CDI_NCCL_PLUGINS=none")
if name == "none-ann":
    c.setdefault("annotations", {})["rdma.example.com/nccl-plugins"] = "none"
pr["env"] = env
for m in c["mounts"]:
    if m["destination"] == "/dev/shm":
        m["options"] = [o for o in m["options"] if not o.startswith("size=")] + ["size=1g"]
json.dump(c, open(p, "w"), indent=1)
PY
		echo "## cdiapply $n: ${gpudev[*]} $VENDOR/hca=mlx5_1"
		cdiapply -spec-dir "$SPEC_DIR" -config "$b/config.json" "${gpudev[@]}" "$VENDOR/hca=mlx5_1" | grep -E 'injected|createRuntime.*rdma-cdi'
		[ "$n" = lent ] && cp "$b/config.json" "$out/config-$n.json" # the others differ in env and annotations alone
	done

	echo "## runc run, all at once"
	local pids=() rcs=()
	for n in "${NAMES[@]}"; do
		timeout 240 runc --root /run/nccl-plugins-runc run --bundle "$W/$n" "$n" </dev/null >"$out/container-$n.log" 2>&1 &
		pids+=($!)
	done
	for i in "${!NAMES[@]}"; do
		wait "${pids[$i]}"
		rcs+=($?)
	done
	for i in "${!NAMES[@]}"; do
		n=${NAMES[$i]}
		echo "---------------- $n (runc rc=${rcs[$i]})"
		grep -vE 'dlvsym failed|NCCL INFO +[0-9]+ : |NCCL INFO (  |Channel|Ring|Trees|Pattern|P2P Chunksize|[0-9]+ coll channels|Tuner: |[ ]*Algorithm|[ ]*Protocol|[ ]*Max NThreads|[ ]*(Tree|Ring|CollNet|NVLS|PAT)[ /])' "$out/container-$n.log"
		echo "--- what the hooks wrote in the upper layer"
		(cd "$W/$n/upper" && find . \( -path ./plugtest -o -path ./proc -o -path ./sys -o -path ./dev \) -prune -o \( -type f -o -type d -empty \) -print | grep -vE '^\./(tmp|root/\.cache)|__pycache__' | sort | head -20)
	done
	echo "--- our hook log"; cat "$R/log/hooks.log" 2>&1

	echo "## summary"
	{
		for i in "${!NAMES[@]}"; do
			n=${NAMES[$i]}
			echo "$n: runc rc=${rcs[$i]}"
			grep -hE "allreduce sum|mapped: .*libnccl-(net|tuner)|^mounts:|^ldconfig -p:|^    NCCL_(NET|TUNER)_PLUGIN|^    NCCL_TOPO_FILE" "$out/container-$n.log" | sed 's/^/  /'
			grep -hE "NCCL INFO .*(Plugin|plugin|Using network|NCCL_TOPO_FILE|NCCL_NET_PLUGIN|NCCL_TUNER_PLUGIN|[Tt]opology file|Loading topology)" "$out/container-$n.log" |
				sed -E 's/^[^ ]+:[0-9]+:[0-9]+ \[[0-9]+\] //; s/^/  /' | sort | uniq -c
		done
		echo "hook log, NCCL plugins decisions:"
		grep -E "nccl-plugins=|NCCL plugin" "$R/log/hooks.log" | sed -E 's/^time="[^"]*" //'
	} | tee "$out/summary"
	cleanup
	cp "$TOPO" "$out/" 2>/dev/null # with the log, summary, one config and four container logs: the 8 files $OUT brings back
	rm -f "$SPEC_DIR/nvidia.yaml" "$SPEC_DIR/$VENDOR-hca.json"
}

case ${1:-run} in
prepare) prepare ;;
run) export ORIG_PATH=$PATH; mkdir -p "${OUT:-/tmp/nccl-plugins-out}" && run 2>&1 | tee "${OUT:-/tmp/nccl-plugins-out}/nccl-plugins.log" ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
