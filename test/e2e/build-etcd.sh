#!/usr/bin/env bash
# Builds the etcd server into $ENGINES_DIR/etcd-$ETCD_VERSION from the Go
# module proxy's copy of go.etcd.io/etcd/server/v3 (KUBERNETES.md). Debian's
# etcd 3.4 is older than Kubernetes 1.35-1.37 support (kubeadm's minimum
# external etcd is 3.5.24; 1.37 ships with 3.7.0).
#   ETCD_VERSION=v3.7.0 ENGINES_DIR=~/.cache/rdma-cdi/engines test/e2e/build-etcd.sh
#
# `go install` refuses the module (it has replace directives pointing at its
# sibling modules), so the source is copied and the replaces dropped: the
# siblings then come from the proxy at the versions go.mod names.
set -euo pipefail
: "${ETCD_VERSION:?}" "${ENGINES_DIR:?}"
bin=$ENGINES_DIR/etcd-$ETCD_VERSION
src=$ENGINES_DIR/src/etcd-server-$ETCD_VERSION
mkdir -p "$bin" "$ENGINES_DIR/src"

drop_replaces() {
	sed -i '/^replace (/,/^)/d; /^replace /d' go.mod
}
source "$(dirname "$0")/module-source.sh"
module_source go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$src" drop_replaces

cd "$src"
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" .
mv "$bin/etcd.tmp" "$bin/etcd"
"$bin/etcd" --version | sed -n 1p  # sed reads it all: head would SIGPIPE etcd under pipefail
cd /
rm -rf "$src"
