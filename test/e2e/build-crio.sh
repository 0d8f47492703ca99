#!/usr/bin/env bash
# Builds CRI-O's crio and pinns into $ENGINES_DIR/bin from the Go module
# proxy's copy of the source (`go install` is refused for this module).
#   CRIO_VERSION=v1.34.0 ENGINES_DIR=~/.cache/rdma-cdi/engines test/e2e/build-crio.sh
set -euo pipefail
: "${CRIO_VERSION:?}" "${ENGINES_DIR:?}"
src=$ENGINES_DIR/src/cri-o-$CRIO_VERSION
mkdir -p "$ENGINES_DIR/bin" "$ENGINES_DIR/src"
source "$(dirname "$0")/module-source.sh"
module_source github.com/cri-o/cri-o "$CRIO_VERSION" "$src"
cd "$src"
CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath \
	-tags "containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion containers_image_openpgp" \
	-o "$ENGINES_DIR/bin/crio" ./cmd/crio
make -C pinns >/dev/null
install -m 0755 pinns/bin/pinns "$ENGINES_DIR/bin/pinns" 2>/dev/null || install -m 0755 bin/pinns "$ENGINES_DIR/bin/pinns"
"$ENGINES_DIR/bin/crio" --version | sed -n 1,3p
