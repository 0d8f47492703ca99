#!/usr/bin/env bash
# Runs the seed002 job image (test/images/torch.sh) under podman on this
# machine, the way seed 002's PyTorchJob would run it, without Kubernetes:
#
#   test/images/torch_check.sh [SCENARIO...]     # as root; default: all
#
#   one-node   one container: torch.distributed.launch --nproc_per_node 8
#              --nnodes 1 ... main.py <the seed's arguments>: 8 ranks
#   two-node   two containers on one podman network, --nnodes 2, node_rank
#              0 and 1, master_addr the first one's address: 16 ranks
#   seed       the seed's exact command lines (Master's and Worker's, read
#              from ../shared/seeds/002_*.txt), run by /bin/sh -c with the env
#              the Kubeflow training operator (v1.9) gives the two pods:
#              MASTER_ADDR=<job>-master-0 (the master's Service; the
#              operator names pod and Service alike, so it is also the master
#              pod's HOSTNAME), MASTER_PORT=23456, WORLD_SIZE=2, RANK=0/1,
#              PYTHONUNBUFFERED=0, and HOSTNAME = each pod's own name. The
#              Service's DNS name is an --add-host entry (this podman has no
#              DNS plugin).
#   seed-worker-hostname
#              the same, but the worker runs the Master's command line
#              (`--master_addr $HOSTNAME`): where its rendezvous then goes.
#              Stopped after 700 s (torch 1.13 gave up on neither side in
#              881 s here; /bin/sh as PID 1 ignores the SIGTERM).
#
# Output: the containers' logs, prefixed with the container's name.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
IMG=registry.baidubce.com/cce-ai-native/swin-transformer-torch:v2.0
ARGS=(--cfg x --pretrained y --data-path /imagenet --batch-size 128 --accumulation-steps 2)
NET=rdma-cdi-seed002
SUBNET=10.89.42
JOB=pytorch-swin-transformer-nccl
SEEDS=${RDMA_CDI_SEEDS_DIR:-$HERE/../../../shared/seeds}
# This machine's podman: runc with cgroupfs (ENGINES.md), ulimits within
# the hard limits.
P=(podman --cgroup-manager=cgroupfs --runtime runc)
RUNOPTS=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --shm-size 1g)

[ "$(id -u)" -eq 0 ] || { echo "torch_check: run as root" >&2; exit 1; }
"${P[@]}" image exists "$IMG" || { echo "torch_check: $IMG missing (make images-torch)" >&2; exit 1; }

# prefix NAME: the container's log lines, prefixed.
prefix() { sed -u "s/^/[$1] /"; }

net_up() {
	"${P[@]}" network exists "$NET" || "${P[@]}" network create --subnet "$SUBNET.0/24" "$NET" >/dev/null
}
net_down() { "${P[@]}" network rm -f "$NET" >/dev/null 2>&1; }
rm_ctrs() { "${P[@]}" rm -f -t 0 "$@" >/dev/null 2>&1; }

one_node() {
	echo "### one-node: 8 processes in one container"
	echo "\$ python -m torch.distributed.launch --nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr 127.0.0.1 --master_port 29500 main.py ${ARGS[*]}"
	"${P[@]}" run --rm --network none "${RUNOPTS[@]}" "$IMG" \
		python -m torch.distributed.launch --nproc_per_node 8 --nnodes 1 --node_rank 0 \
		--master_addr 127.0.0.1 --master_port 29500 main.py "${ARGS[@]}" 2>&1 | prefix node0
	echo "rc=${PIPESTATUS[0]}"
}

two_node() {
	echo "### two-node: two containers on podman network $NET, 8 processes each"
	local n rc=()
	net_up
	rm_ctrs s002-n0 s002-n1
	for n in 0 1; do
		echo "\$ [s002-n$n] python -m torch.distributed.launch --nproc_per_node 8 --nnodes 2 --node_rank $n --master_addr $SUBNET.10 --master_port 29500 main.py ${ARGS[*]}"
		"${P[@]}" run --rm --name "s002-n$n" --hostname "s002-n$n" --network "$NET" --ip "$SUBNET.1$n" "${RUNOPTS[@]}" "$IMG" \
			python -m torch.distributed.launch --nproc_per_node 8 --nnodes 2 --node_rank "$n" \
			--master_addr "$SUBNET.10" --master_port 29500 main.py "${ARGS[@]}" >"$WORK/n$n.log" 2>&1 &
	done
	for n in 0 1; do wait -n; rc+=($?); done
	for n in 0 1; do prefix "s002-n$n" <"$WORK/n$n.log"; done
	echo "rc=${rc[*]}"
}

# seed_cmd TYPE: the seed's command line for Master or Worker (its third
# command item), from the seed's numbered listing.
seed_cmd() {
	local f line
	f=$(ls "$SEEDS"/002_*.txt 2>/dev/null | head -n1)
	[ -n "$f" ] || { echo "torch_check: seed 002 not found in $SEEDS (RDMA_CDI_SEEDS_DIR)" >&2; return 1; }
	case $1 in Master) line=22 ;; Worker) line=63 ;; esac
	sed -n "s/^$line - //p" "$f"
}

# seed_run MASTER_CMD WORKER_CMD [TIMEOUT]: the two pods as the operator
# makes them, each running its command with /bin/sh -c.
seed_run() {
	local mcmd=$1 wcmd=$2 limit=${3:-300} i rc=() name cmd
	net_up
	rm_ctrs "$JOB-master-0" "$JOB-worker-0"
	for i in 0 1; do
		if [ $i -eq 0 ]; then name=$JOB-master-0 cmd=$mcmd; else name=$JOB-worker-0 cmd=$wcmd; fi
		echo "\$ [$name] /bin/sh -c '$cmd'"
		timeout -k 10 "$limit" "${P[@]}" run --rm --name "$name" --hostname "$name" --network "$NET" --ip "$SUBNET.2$i" \
			--add-host "$JOB-master-0:$SUBNET.20" "${RUNOPTS[@]}" --cap-add IPC_LOCK \
			-e NCCL_DEBUG=INFO -e NCCL_IB_DISABLE=0 \
			-e MASTER_ADDR="$JOB-master-0" -e MASTER_PORT=23456 -e WORLD_SIZE=2 -e RANK=$i -e PYTHONUNBUFFERED=0 \
			"$IMG" /bin/sh -c "$cmd" >"$WORK/seed$i.log" 2>&1 &
	done
	for i in 0 1; do wait -n; rc+=($?); done
	rm_ctrs "$JOB-master-0" "$JOB-worker-0"
	prefix "$JOB-master-0" <"$WORK/seed0.log"
	prefix "$JOB-worker-0" <"$WORK/seed1.log"
	echo "rc=${rc[*]} (124: stopped by timeout ${limit}s)"
}

seed() {
	echo "### seed: the seed's Master and Worker command lines, the operator's env"
	seed_run "$(seed_cmd Master)" "$(seed_cmd Worker)"
}

seed_worker_hostname() {
	echo "### seed-worker-hostname: the worker runs the Master's command line (--master_addr \$HOSTNAME)"
	local start=$SECONDS
	seed_run "$(seed_cmd Master)" "$(seed_cmd Master)" 700
	echo "ended after $((SECONDS - start)) s"
}

WORK=$(mktemp -d /tmp/rdma-cdi-torch-check.XXXXXX)
trap 'rm -rf "$WORK"; net_down' EXIT
[ $# -gt 0 ] || set -- one-node two-node seed seed-worker-hostname
echo "# $IMG: $("${P[@]}" run --rm --network none "${RUNOPTS[@]}" "$IMG" python -c 'import sys, torch; print("torch", torch.__version__, "python", sys.version.split()[0])')"
for s in "$@"; do
	case $s in
	one-node) one_node ;;
	two-node) two_node ;;
	seed) seed ;;
	seed-worker-hostname) seed_worker_hostname ;;
	*) echo "torch_check: unknown scenario $s" >&2; exit 2 ;;
	esac
done
