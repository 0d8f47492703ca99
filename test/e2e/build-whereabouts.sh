#!/usr/bin/env bash
# Builds the Whereabouts CNI IPAM plugin into
# $ENGINES_DIR/whereabouts-$WHEREABOUTS_VERSION from the Go module proxy's
# copy, with its IPPool and OverlappingRangeIPReservation CRDs from the same
# module: the IPAM a pod network delegates to in the same-subnet test.
#   WHEREABOUTS_VERSION=v0.9.2 ENGINES_DIR=~/.cache/rdma-cdi/engines test/e2e/build-whereabouts.sh
#
# `go install` refuses the module (a replace directive), so the source is
# copied and built where it is; the replace stays.
set -euo pipefail
: "${WHEREABOUTS_VERSION:?}" "${ENGINES_DIR:?}"
bin=$ENGINES_DIR/whereabouts-$WHEREABOUTS_VERSION
src=$ENGINES_DIR/src/whereabouts-$WHEREABOUTS_VERSION
mkdir -p "$bin" "$ENGINES_DIR/src"
source "$(dirname "$0")/module-source.sh"
module_source github.com/k8snetworkplumbingwg/whereabouts "$WHEREABOUTS_VERSION" "$src"

cd "$src"
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/whereabouts.tmp" ./cmd/
mv "$bin/whereabouts.tmp" "$bin/whereabouts"
cp doc/crds/whereabouts.cni.cncf.io_ippools.yaml doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml doc/crds/daemonset-install.yaml "$bin/"
cd /
rm -rf "$src"
