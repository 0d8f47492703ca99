#!/usr/bin/env bash
# Builds the images of the user-space tests from Debian packages:
#
#   test/images/stacks.sh OUTDIR
#
# Writes NAME.tar (rootfs) and NAME-docker.tar (docker-archive) under OUTDIR
# and imports each into podman as localhost/rdma-cdi-NAME:latest:
#   ownstack   trixie's rdma-core 56.1 (libibverbs1, ibverbs-providers, libnl,
#              ibverbs-utils) on trixie's glibc, plus /usr/bin/mlx5probe, which
#              needs libmlx5's MLX5_1.25 (rdma-core >= 50): the host's 44.0
#              cannot run it. An NGC-like image that brings its own stack.
#   noprov     trixie's libibverbs1, libnl and ibverbs-utils without
#              ibverbs-providers: a libibverbs that sees no HCA.
#   lib64      trixie's glibc laid out RHEL-style, every library in /usr/lib64
#              (no /usr/lib/<triplet>; its linker cache says so), no rdma-core,
#              plus the host's ibv_devices (which needs a lent libibverbs).
# All three are busybox on trixie's glibc, a few MB each.
# Each is rebuilt only when this script or its inputs change (a stamp).
set -euo pipefail

OUT=${1:?usage: stacks.sh OUTDIR}
mkdir -p "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "stack images: $*"; }
[ "$(id -u)" -eq 0 ] || { echo "stack images: must run as root" >&2; exit 1; }
for c in podman gcc dpkg-deb apt-get ldconfig; do
	command -v "$c" >/dev/null || { echo "stack images: $c not found (run 'make deps')" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/rdma-cdi-stacks.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ARCH=$(dpkg --print-architecture)
TRIPLET=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# stamp_ok NAME SUM / publish NAME: as build.sh does, per image.
stamp_ok() { [ -s "$OUT/$1.tar" ] && [ -s "$OUT/$1-docker.tar" ] && [ "$(cat "$OUT/$1.stamp" 2>/dev/null)" = "$2" ]; }
publish() {
	local name=$1 root=$2 image=localhost/rdma-cdi-$1:latest
	tar --numeric-owner -C "$root" -cf "$OUT/$name.tar.tmp" . && mv "$OUT/$name.tar.tmp" "$OUT/$name.tar"
	podman rmi -f "$image" >/dev/null 2>&1 || true
	podman import --quiet --change 'CMD ["/bin/sh"]' "$OUT/$name.tar" "$image" >/dev/null
	podman save --quiet --format docker-archive -o "$OUT/$name-docker.tar.tmp" "$image" >/dev/null
	mv "$OUT/$name-docker.tar.tmp" "$OUT/$name-docker.tar"
	echo "$3" >"$OUT/$name.stamp"
	log "$name: done"
}
add_busybox() {
	local r=$1 a
	mkdir -p "$r/bin" "$r/tmp" "$r/proc" "$r/sys" "$r/dev" "$r/etc"
	cp /bin/busybox "$r/bin/busybox"
	for a in $(/bin/busybox --list); do [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"; done
}
script_sum() { cat "$HERE/stacks.sh" "$@" | sha256sum | cut -d' ' -f1; }

# --- trixie's packages, fetched once without touching the host's apt state.
debs=$OUT/cache/trixie-debs
if [ ! -e "$debs/.complete" ]; then
	log "downloading trixie's glibc and rdma-core 56 packages (once)"
	c=$WORK/apt; mkdir -p "$c/lists/partial" "$c/archives/partial" "$debs"
	uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" >"$c/sources.list"
	A=(-o Dir::Etc::sourcelist="$c/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$c/lists" -o Dir::Cache="$c")
	apt-get "${A[@]}" -q update >/dev/null
	(cd "$debs" && apt-get "${A[@]}" -q download libibverbs1/trixie ibverbs-providers/trixie libnl-3-200/trixie \
		libnl-route-3-200/trixie libc6/trixie libgcc-s1/trixie ibverbs-utils/trixie >/dev/null)
	touch "$debs/.complete"
fi

# image_root DIR PKG...: busybox on trixie's glibc plus the named packages.
image_root() {
	local r=$1 p; shift
	mkdir -p "$r"
	for p in libc6 libgcc-s1 "$@"; do dpkg-deb -x "$debs/${p}_"*.deb "$r"; done
	[ -e "$r/lib" ] || ln -s usr/lib "$r/lib"
	[ -e "$r/lib64" ] || ln -s usr/lib64 "$r/lib64"
	add_busybox "$r"
	rm -rf "$r/usr/share"
}

# --- ownstack
sum=$(script_sum "$debs"/*.deb /bin/busybox)
if stamp_ok ownstack "$sum"; then
	log "ownstack: up to date"
else
	r=$WORK/ownstack
	image_root "$r" libibverbs1 ibverbs-providers libnl-3-200 libnl-route-3-200 ibverbs-utils
	lib=$r/usr/lib/$TRIPLET
	cat >"$WORK/mlx5probe.c" <<'C'
#include <stdio.h>
#include <stddef.h>
struct ibv_context;
/* MLX5_1.25, rdma-core >= 50: the symbol NCCL's data-direct path needs. */
int mlx5dv_get_data_direct_sysfs_path(struct ibv_context *ctx, char *buf, size_t len);
int main(void) {
	printf("mlx5probe: MLX5_1.25 resolved at %p\n", (void *)mlx5dv_get_data_direct_sysfs_path);
	return 0;
}
C
	gcc -o "$r/usr/bin/mlx5probe" "$WORK/mlx5probe.c" "$lib/libmlx5.so.1" -Wl,-rpath-link,"$lib" -Wl,--allow-shlib-undefined
	grep -q 'MLX5_1.25' <<<"$(objdump -p "$r/usr/bin/mlx5probe")" || { echo "stack images: mlx5probe does not need MLX5_1.25" >&2; exit 1; }
	ldconfig -r "$r"
	publish ownstack "$r" "$sum"
fi

# --- noprov
if stamp_ok noprov "$sum"; then
	log "noprov: up to date"
else
	r=$WORK/noprov
	image_root "$r" libibverbs1 libnl-3-200 libnl-route-3-200 ibverbs-utils
	ldconfig -r "$r"
	publish noprov "$r" "$sum"
fi

# --- lib64
IBV_TOOLS=(/usr/bin/ibv_devices /usr/bin/ibv_devinfo)
lsum=$(script_sum "$debs"/*.deb /bin/busybox "${IBV_TOOLS[@]}")
if stamp_ok lib64 "$lsum"; then
	log "lib64: up to date"
else
	r=$WORK/lib64
	image_root "$r"
	rm -rf "$r/usr/lib64"
	mv "$r/usr/lib/$TRIPLET" "$r/usr/lib64"
	rm -f "$r/etc/ld.so.conf.d/"*.conf
	echo /usr/lib64 >"$r/etc/ld.so.conf.d/lib64.conf"
	echo 'include /etc/ld.so.conf.d/*.conf' >"$r/etc/ld.so.conf"
	mkdir -p "$r/usr/bin" && install -m 0755 "${IBV_TOOLS[@]}" "$r/usr/bin/"
	ldconfig -r "$r"
	[ ! -e "$r/usr/lib/$TRIPLET" ] || { echo "stack images: lib64 still has /usr/lib/$TRIPLET" >&2; exit 1; }
	grep -q ' => /usr/lib64/libc.so.6$' <<<"$(ldconfig -r "$r" -p)" || { echo "stack images: lib64's cache lacks /usr/lib64/libc.so.6" >&2; exit 1; }
	publish lib64 "$r" "$lsum"
fi
log "ready: ownstack noprov lib64 in $OUT"
