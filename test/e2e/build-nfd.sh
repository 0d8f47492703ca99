#!/usr/bin/env bash
# Builds Node Feature Discovery's worker and master into
# $ENGINES_DIR/nfd-$NFD_VERSION from the Go module proxy's copy, with its
# NodeFeature CRDs from the same module: the real NFD that turns the
# agent's features.d file into node labels in the topology test.
#   NFD_VERSION=v0.18.2 ENGINES_DIR=~/.cache/rdma-cdi/engines test/e2e/build-nfd.sh
#
# The proxy lists no version of sigs.k8s.io/node-feature-discovery but
# serves an exact one; `go install` refuses the module (replace
# directives), so the source is copied and built where it is, with its
# nested API module (a replace to ./api/nfd, which the module's copy
# leaves out) from the proxy at the same version.
set -euo pipefail
: "${NFD_VERSION:?}" "${ENGINES_DIR:?}"
bin=$ENGINES_DIR/nfd-$NFD_VERSION
src=$ENGINES_DIR/src/nfd-$NFD_VERSION
mkdir -p "$bin" "$ENGINES_DIR/src"
source "$(dirname "$0")/module-source.sh"
nested_api() {
	module_source sigs.k8s.io/node-feature-discovery/api/nfd "$NFD_VERSION" api/nfd
}
module_source sigs.k8s.io/node-feature-discovery "$NFD_VERSION" "$src" nested_api

cd "$src"
for cmd in nfd-worker nfd-master; do
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/$cmd.tmp" "./cmd/$cmd"
	mv "$bin/$cmd.tmp" "$bin/$cmd"
done
cp deployment/base/nfd-crds/nfd-api-crds.yaml "$bin/"
cd /
rm -rf "$src"
