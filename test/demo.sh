#!/usr/bin/env bash
# The main job on a bundled demo node: seed 002's 9-HCA RoCE node as a
# kernel-like sysfs fixture, its netdevs as real veths in a private network
# namespace. Runs unprivileged: a user namespace maps you to root in it.
set -euo pipefail
cd "$(dirname "$0")/.."

topology=test/fixtures/seed002.toml
out=_out/demo
rm -rf "$out" && mkdir -p "$out"
bin/mkfixture build -topology "$topology" -out "$out"

roots=(--sysfs-root "$out/sys" --dev-root "$out/dev")
unshare --user --map-root-user --net bash -euo pipefail -c '
  bin/mkfixture net -topology "$0"
  echo "(unprivileged: the fixture'"'"'s /dev nodes are placeholder files, as mknod needs real root; logs below error level are hidden)"
  echo
  echo "### rdma-cdi list"
  bin/rdma-cdi --log-level=error "$@" list
  echo
  echo "### rdma-cdi nccl-env"
  bin/rdma-cdi --log-level=error "$@" nccl-env
  echo
  echo "### rdma-cdi nccl-env --format mpirun"
  bin/rdma-cdi --log-level=error "$@" nccl-env --format mpirun
  echo
  echo "### rdma-cdi generate --output - (the CDI spec podman, containerd and Docker read)"
  bin/rdma-cdi --log-level=error "$@" generate --output -
' "$topology" "${roots[@]}"
