#!/usr/bin/env bash
# Builds the image of seed 002's PyTorchJob, only when asked
# (`make images-torch`, or e2e.SeedTorch.DockerArchive): it is about 0.9 GB.
#
#   test/images/torch.sh OUTDIR
#
# Debian minbase (the host's codename, bookworm here) made by mmdebstrap from
# the host's apt sources, plus python3-torch (Debian's CPU build, 1.13.1 in
# bookworm), python-is-python3 (the seed runs `python`) and iproute2 (main.py
# lists the pod's addresses), pruned by test/images/torch_prune.py to what the
# job loads (about 0.9 GB of 1.4: each node of a test imports it), and our
# test/images/main.py in /workspace, the image's WORKDIR: the seed's command
# line (`... main.py --cfg ...`) runs it there. main.py is a gloo all-reduce
# stand-in, not Swin-Transformer (its header says what it does).
#
# Writes under OUTDIR, as build.sh does for the other images:
#   seedtorch.tar          rootfs tar
#   seedtorch-docker.tar   docker-archive (ctr images import, docker load),
#                          tagged with the seed's image name, REF below
# and leaves the image in the host's podman storage as REF. Rebuilt only when
# this script, torch_prune.py or main.py changes (a stamp). Run as root.
set -euo pipefail

OUT=${1:?usage: torch.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=seedtorch
REF=registry.baidubce.com/cce-ai-native/swin-transformer-torch:v2.0
log() { echo "images: $NAME: $*"; }

for c in podman mmdebstrap sha256sum tar flock; do
	command -v "$c" >/dev/null || { echo "images: $c not found (run 'make deps')" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "images: must run as root (mmdebstrap, podman)" >&2; exit 1; }

# One build at a time per OUTDIR (test binaries may ask concurrently).
exec 9>"$OUT/$NAME.lock"
flock 9

sum=$(cat "$HERE/torch.sh" "$HERE/torch_prune.py" "$HERE/main.py" | sha256sum | cut -d' ' -f1)
if [ -s "$OUT/$NAME.tar" ] && [ -s "$OUT/$NAME-docker.tar" ] && [ "$(cat "$OUT/$NAME.stamp" 2>/dev/null)" = "$sum" ]; then
	log "up to date ($OUT/$NAME-docker.tar)"
	exit 0
fi

WORK=$(mktemp -d /tmp/rdma-cdi-torch.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
# Bookworm's torch 1.13 under its Python 3.11: torch.distributed.launch (and
# torchrun) die at start with "AttributeError: 'NoneType' object has no
# attribute 'get'" in elastic/multiprocessing/api.py's to_map, because
# Std.from_str looks the --redirects/--tee value ("0") up by iterating the
# IntFlag Std, and Python 3.11 no longer yields the 0-valued NONE (nor the
# alias ALL) when iterating a flag. torch 2.0 no longer looks it up that
# way; here the lookup becomes Std(v), the one change this image makes to
# Debian's torch. The build fails if the code is not there as expected.
PATCH_STD='f="$1/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py"; perl -0pi -e '"'"'s/^( +)for s in Std:\n +if s == v:\n +return s\n/$1return Std(v)  # rdma-cdi test image: Python 3.11 iterates no 0-valued flag\n/m or die "torch.sh: Std.from_str not as expected\n"'"'"' "$f"'
log "mmdebstrap --variant=minbase --include=python3-torch,python-is-python3,iproute2 $codename"
# No mirror argument: mmdebstrap uses the host's apt sources. No Recommends:
# the image needs torch's run-time dependencies only.
mmdebstrap --format=tar --variant=minbase --include=python3-torch,python-is-python3,iproute2 \
	--aptopt='APT::Install-Recommends "false"' \
	--customize-hook='mkdir -p "$1/workspace"' \
	--customize-hook="copy-in $HERE/main.py /workspace" \
	--customize-hook='chmod 0755 "$1/workspace/main.py"' \
	--customize-hook="$PATCH_STD" \
	--customize-hook="$HERE/torch_prune.py \"\$1\"" \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
	"$codename" "$OUT/$NAME.tar.tmp" >"$WORK/mmdebstrap.log" 2>&1 || {
	tail -n 30 "$WORK/mmdebstrap.log" >&2
	exit 1
}
mv "$OUT/$NAME.tar.tmp" "$OUT/$NAME.tar"

podman rmi -f "$REF" >/dev/null 2>&1 || true
podman import --quiet --change 'WORKDIR /workspace' --change 'CMD ["/bin/bash"]' \
	--change 'ENV PYTHONUNBUFFERED=1' "$OUT/$NAME.tar" "$REF" >/dev/null
rm -f "$OUT/$NAME-docker.tar.tmp"
podman save --quiet --format docker-archive -o "$OUT/$NAME-docker.tar.tmp" "$REF" >/dev/null
mv "$OUT/$NAME-docker.tar.tmp" "$OUT/$NAME-docker.tar"
echo "$sum" >"$OUT/$NAME.stamp"
log "done: $REF, $(du -h "$OUT/$NAME-docker.tar" | cut -f1)"
