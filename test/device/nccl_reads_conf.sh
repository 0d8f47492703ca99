#!/usr/bin/env bash
# Proves on a GPU machine that real NCCL reads the /etc/nccl.conf that the
# nccl-conf hook writes (testdata/nccl.conf was captured from a podman
# container on the seed002 fixture), and that the process env beats it.
# Run as root on the device machine: bash test/device/nccl_reads_conf.sh
set -uo pipefail
cd "$(dirname "$0")"
out=${OUT:-/tmp/nccl-proof}; mkdir -p "$out"
[ -e /etc/nccl.conf ] && cp /etc/nccl.conf "$out/nccl.conf.orig"
cp testdata/nccl.conf /etc/nccl.conf

cat > "$out/allreduce.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29511", rank=0, world_size=1)
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("allreduce ok", t.tolist(), "NCCL", torch.cuda.nccl.version())
dist.destroy_process_group()
PY

# Run 1: the file alone; only NCCL_SOCKET_IFNAME comes from the process env
# (the file's eth0 may not exist here), so it must win over the file.
env -u NCCL_DEBUG NCCL_SOCKET_IFNAME=lo python3 "$out/allreduce.py" >"$out/run1.log" 2>&1; echo "run1 rc=$?" | tee -a "$out/summary"
# Run 2: a user value for a key the file sets (NCCL_IB_TIMEOUT) beats it.
env -u NCCL_DEBUG NCCL_SOCKET_IFNAME=lo NCCL_IB_TIMEOUT=19 python3 "$out/allreduce.py" >"$out/run2.log" 2>&1; echo "run2 rc=$?" | tee -a "$out/summary"

if [ -e "$out/nccl.conf.orig" ]; then cp "$out/nccl.conf.orig" /etc/nccl.conf; else rm -f /etc/nccl.conf; fi
grep -h "set by environment\|allreduce ok\|NCCL version\|NET/IB\|NET/Socket" "$out"/run*.log | sort | uniq -c | tee -a "$out/summary"
