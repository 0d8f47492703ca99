#!/usr/bin/env bash
# Installs the Debian packages that the end-to-end tests need, only those
# missing. Idempotent: a second run with everything present does nothing.
set -euo pipefail

# Packages: engines, image tooling, a C toolchain (CRI-O and its pinns are
# built here; a test builds a library with a crafted soname), the RDMA user-space libraries (no rdma-core
# package: it brings services we do not want), tools the fixtures use, and
# Prometheus (with promtool) and tmux for the metrics and `top` tests, rpm
# to install the RPM into a scratch root, and the CNI plugins (bridge,
# host-local, loopback) that give the Kubernetes test nodes a pod network.
PKGS=(
	podman runc conmon uidmap
	docker.io
	busybox-static debootstrap mmdebstrap
	iproute2 iptables util-linux tar gcc libc6-dev make
	ibverbs-utils libibverbs1 ibverbs-providers librdmacm1
	libnl-3-200 libnl-route-3-200 libnuma1
	prometheus tmux curl jq
	containernetworking-plugins
	rpm
)

missing=()
for p in "${PKGS[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all ${#PKGS[@]} packages present"
	exit 0
fi

echo "deps: missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: not root; install them as root with:" >&2
	echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Do not let package scripts start daemons (docker, containerd) on the host:
# the tests start their own, with private roots.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	own_policy=1
fi
trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT

apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "deps: installed ${missing[*]}"
