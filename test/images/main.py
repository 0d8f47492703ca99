#!/usr/bin/env python3
# main.py of the seed002 test image (test/images/torch.sh), rdma-cdi's own.
#
# This is NOT Swin-Transformer and trains nothing. It stands in for the
# seed's `main.py` so that the seed's PyTorchJob command line runs unchanged:
#
#   python -m torch.distributed.launch --nproc_per_node 8 --nnodes $WORLD_SIZE
#     --node_rank $RANK --master_addr ... --master_port $MASTER_PORT main.py
#     --cfg ... --pretrained ... --data-path /imagenet --batch-size 128
#     --accumulation-steps 2
#
# It accepts the seed's arguments and ignores their values, as well as the
# --local_rank (torch 1.13's torch.distributed.launch) or --local-rank (newer
# torch) that the launcher adds. What it does:
#   - joins torch.distributed with the gloo backend, env:// (MASTER_ADDR,
#     MASTER_PORT, RANK, WORLD_SIZE, set by the launcher for each process);
#   - all-reduces a tensor holding rank+1 over every rank and checks that the
#     sum is n(n+1)/2; each rank prints one line:
#         rank 3/16 allreduce sum 136 ok
#     (or "... WRONG, want N", exit status 1);
#   - on each node's local rank 0, prints what the launcher gave the process
#     (hostname, MASTER_ADDR, MASTER_PORT), the NCCL settings this process
#     would hand NCCL (every NCCL_* variable of its environment and the
#     contents of /etc/nccl.conf, and of $NCCL_CONF_FILE, where present), and
#     what RDMA needs of the container: its /dev/infiniband entries, whether
#     CAP_IPC_LOCK is in its effective set, its memlock limits and its IPv4
#     addresses by interface.
# NCCL itself is not used: the image has CPU-only torch (Debian's
# python3-torch). test/device/seed002_nccl.sh does the NCCL half on GPUs.
import argparse
import os
import resource
import socket
import subprocess
import sys

import torch
import torch.distributed as dist


def parse_args(argv):
    p = argparse.ArgumentParser(description="seed002 stand-in: a gloo all-reduce, not a training run")
    for flag in ("--cfg", "--pretrained", "--data-path", "--batch-size", "--accumulation-steps"):
        p.add_argument(flag, default=None, help="accepted and ignored (the seed passes it)")
    p.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None,
                   help="added by torch.distributed.launch; LOCAL_RANK otherwise")
    return p.parse_args(argv)


def nccl_settings(prefix):
    for k in sorted(os.environ):
        if k.startswith("NCCL_"):
            print(f"{prefix} env {k}={os.environ[k]}")
    files = ["/etc/nccl.conf"]
    if os.environ.get("NCCL_CONF_FILE"):
        files.append(os.environ["NCCL_CONF_FILE"])
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            print(f"{prefix} {path}: absent ({e.strerror})")
            continue
        print(f"{prefix} {path}:")
        for line in text.splitlines():
            print(f"{prefix}   {line}")


def rdma_needs(prefix):
    try:
        entries = " ".join(sorted(os.listdir("/dev/infiniband")))
    except OSError as e:
        entries = f"absent ({e.strerror})"
    print(f"{prefix} /dev/infiniband: {entries}")
    with open("/proc/self/status") as f:
        eff = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    print(f"{prefix} CAP_IPC_LOCK {'effective' if eff & (1 << 14) else 'missing'}")
    def limit(v):
        return "unlimited" if v == resource.RLIM_INFINITY else str(v)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    print(f"{prefix} memlock soft {limit(soft)} hard {limit(hard)}")
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            fields = line.split()
            print(f"{prefix} inet {fields[1]} {fields[3]}")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"{prefix} inet: ip failed ({e})")


def main():
    args = parse_args(sys.argv[1:])
    local_rank = args.local_rank if args.local_rank is not None else int(os.environ.get("LOCAL_RANK", "0"))
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if local_rank == 0:
        prefix = f"rank {rank}/{world}"
        print(f"{prefix} host {socket.gethostname()} MASTER_ADDR={os.environ.get('MASTER_ADDR')} "
              f"MASTER_PORT={os.environ.get('MASTER_PORT')} torch {torch.__version__}", flush=True)
        nccl_settings(prefix)
        rdma_needs(prefix)
        sys.stdout.flush()
    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    got, want = int(t.item()), world * (world + 1) // 2
    verdict = "ok" if got == want else f"WRONG, want {want}"
    # One write(2) for the whole line: the ranks share the launcher's stdout.
    os.write(1, f"rank {rank}/{world} allreduce sum {got} {verdict}\n".encode())
    dist.barrier()
    dist.destroy_process_group()
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main())
