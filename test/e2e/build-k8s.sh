#!/usr/bin/env bash
# Builds kubelet, kube-apiserver, kube-scheduler, kube-controller-manager and
# kubectl into $ENGINES_DIR/k8s-$K8S_VERSION from the Go module proxy's copy
# of k8s.io/kubernetes (KUBERNETES.md); one directory per version, so the
# newest release and the oldest supported one sit side by side.
#   K8S_VERSION=v1.37.2 ENGINES_DIR=~/.cache/rdma-cdi/engines test/e2e/build-k8s.sh
#
# `go install k8s.io/kubernetes/cmd/kubelet@VERSION` is refused (the module has
# replace directives for its staging modules), so the source is copied, the
# staging replaces are dropped and the staging modules pinned to their
# published v0.X.Y versions. The build uses a Go build cache of its own and
# removes it and the source copy afterwards (K8S_KEEP_BUILD=1 keeps both,
# K8S_GOCACHE picks another cache dir).
set -euo pipefail
: "${K8S_VERSION:?}" "${ENGINES_DIR:?}"
bin=$ENGINES_DIR/k8s-$K8S_VERSION
src=$ENGINES_DIR/src/kubernetes-$K8S_VERSION
mkdir -p "$bin" "$ENGINES_DIR/src"

# The module as published: no workspace, vendor dir or replaces, and the
# staging modules at v0.<minor>.<patch> instead of v0.0.0.
unstage() {
	rm -rf go.work go.work.sum vendor
	sed -i '/^replace (/,/^)/d' go.mod
	local staging=v0.${K8S_VERSION#v1.}
	sed -i -E "s#^(\tk8s\.io/[a-z-]+) v0\.0\.0\$#\1 $staging#" go.mod
}
source "$(dirname "$0")/module-source.sh"
module_source k8s.io/kubernetes "$K8S_VERSION" "$src" unstage

cd "$src"
ver=${K8S_VERSION#v}
major=${ver%%.*}
minor=${ver#*.}
minor=${minor%%.*}
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
# A build cache of its own (about 2.7 GB), removed after a good build: the
# binaries are what is kept (the Makefile caches them by version stamp).
# K8S_GOCACHE (e.g. the usual one) is used as given and kept.
gocache=${K8S_GOCACHE:-$ENGINES_DIR/src/gocache-k8s}
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOCACHE=$gocache
for c in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	start=$(date +%s)
	go build -trimpath -ldflags "$LD" -o "$bin/$c.tmp" "./cmd/$c"
	mv "$bin/$c.tmp" "$bin/$c"
	echo "build-k8s: $c in $(($(date +%s) - start)) s"
done
"$bin/kubelet" --version
if [ -z "${K8S_KEEP_BUILD:-}" ]; then
	cd /
	rm -rf "$src"
	[ -n "${K8S_GOCACHE:-}" ] || rm -rf "$gocache"
fi
