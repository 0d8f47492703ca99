#!/usr/bin/env bash
# Builds the local test images (there is no registry on the test machines).
#
#   test/images/build.sh OUTDIR
#
# Writes, under OUTDIR:
#   bb.tar            rootfs tar of a busybox-static image (for podman import, runc bundles)
#   bb-docker.tar     the same as a docker-archive, tagged localhost/rdma-cdi-bb:latest
#   pause-docker.tar  bb as a pod sandbox image (PID 1 waits, exits on SIGTERM),
#                     tagged localhost/rdma-cdi-pause:latest
#   glibc.tar         rootfs tar of a Debian minbase userland WITHOUT rdma-core,
#                     plus the host's ibv_devices and ibv_devinfo
#   glibc-docker.tar  the same as a docker-archive, tagged localhost/rdma-cdi-glibc:latest
#   systemd.tar       rootfs tar of Debian minbase with systemd as /sbin/init
#                     (mmdebstrap), for the test that runs the .deb's units
#   cache/debootstrap-<codename>.tar   debootstrap output, made once
#
# It also imports both images into the host's default podman storage.
# Each image is rebuilt only when its inputs (this script, the host binaries
# copied in) change: a stamp file holds their checksum.
set -euo pipefail

OUT=${1:?usage: build.sh OUTDIR}
mkdir -p "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)

BB_IMAGE=localhost/rdma-cdi-bb:latest
PAUSE_IMAGE=localhost/rdma-cdi-pause:latest
# A PID 1 without a handler ignores SIGTERM: the trap makes a sandbox stop at once.
PAUSE_CMD='["/bin/sh", "-c", "trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait; done"]'
GLIBC_IMAGE=localhost/rdma-cdi-glibc:latest

# Applets linked into the busybox image: all those busybox has.
BUSYBOX=/bin/busybox
IBV_TOOLS=(/usr/bin/ibv_devices /usr/bin/ibv_devinfo)

log() { echo "images: $*"; }

need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || { echo "images: $c not found (run 'make deps')" >&2; exit 1; }
	done
}
need podman debootstrap mmdebstrap sha256sum tar
[ -x "$BUSYBOX" ] || { echo "images: $BUSYBOX missing (busybox-static)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "images: must run as root (debootstrap, podman)" >&2; exit 1; }

# inputs_sum FILE... prints one checksum over the build script and FILEs.
inputs_sum() { cat "$HERE/build.sh" "$@" | sha256sum | cut -d' ' -f1; }

# up_to_date NAME SUM: the image's outputs exist and its stamp matches.
up_to_date() {
	[ -s "$OUT/$1.tar" ] && [ -s "$OUT/$1-docker.tar" ] &&
		[ "$(cat "$OUT/$1.stamp" 2>/dev/null)" = "$2" ]
}

# publish NAME IMAGE [CMD [SAVED]]: imports OUT/NAME.tar into podman as IMAGE
# (its command CMD, /bin/sh by default) and saves a docker-archive as
# OUT/SAVED-docker.tar (SAVED defaults to NAME).
publish() {
	local name=$1 image=$2 cmd=${3:-'["/bin/sh"]'} saved=${4:-$1}
	podman rmi -f "$image" >/dev/null 2>&1 || true
	podman import --quiet --change "CMD $cmd" "$OUT/$name.tar" "$image" >/dev/null
	rm -f "$OUT/$saved-docker.tar.tmp"
	podman save --quiet --format docker-archive -o "$OUT/$saved-docker.tar.tmp" "$image" >/dev/null
	mv "$OUT/$saved-docker.tar.tmp" "$OUT/$saved-docker.tar"
}

# tar_rootfs DIR TAR: a rootfs tar with numeric owners, written atomically.
tar_rootfs() {
	tar --numeric-owner -C "$1" -cf "$2.tmp" .
	mv "$2.tmp" "$2"
}

WORK=$(mktemp -d /tmp/rdma-cdi-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------------------
# (a) busybox image
# ---------------------------------------------------------------------------
sum=$(inputs_sum "$BUSYBOX")
if up_to_date bb "$sum"; then
	log "bb: up to date ($OUT/bb.tar)"
else
	log "bb: building"
	r=$WORK/bb
	mkdir -p "$r"/{bin,etc,dev,proc,sys,tmp,run,var/tmp,root}
	chmod 1777 "$r/tmp" "$r/var/tmp"
	cp "$BUSYBOX" "$r/bin/busybox"
	for a in $("$BUSYBOX" --list); do
		[ "$a" = busybox ] || ln -s busybox "$r/bin/$a"
	done
	ln -s bin "$r/sbin"
	mkdir -p "$r/usr" && ln -s ../bin "$r/usr/bin" && ln -s ../bin "$r/usr/sbin"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$r/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
	tar_rootfs "$r" "$OUT/bb.tar"
	publish bb "$BB_IMAGE"
	echo "$sum" >"$OUT/bb.stamp"
	log "bb: done"
fi
if [ -s "$OUT/pause-docker.tar" ] && [ "$(cat "$OUT/pause.stamp" 2>/dev/null)" = "$sum" ]; then
	log "pause: up to date"
else
	publish bb "$PAUSE_IMAGE" "$PAUSE_CMD" pause
	echo "$sum" >"$OUT/pause.stamp"
	log "pause: done"
fi

# ---------------------------------------------------------------------------
# (b) glibc image: debootstrap minbase (cached) + the host's ibv tools
# ---------------------------------------------------------------------------

# mirror prints the Debian mirror apt uses for SUITE (deb822 .sources files
# first, then one-line sources.list entries).
mirror() {
	local suite=$1 f url=""
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		url=$(awk -v suite="$suite" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "") {
					split(uris, u, " "); print u[1]; found = 1; exit
				}
				types = ""; suites = ""; uris = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			tolower($1) == "types:"  { $1 = ""; types = $0 }
			tolower($1) == "suites:" { $1 = ""; suites = $0 }
			tolower($1) == "uris:"   { $1 = ""; uris = $0; sub(/^ +/, "", uris) }
			END { if (!found) flush() }
		' "$f")
		[ -n "$url" ] && { echo "$url"; return; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		url=$(awk -v suite="$suite" '
			$1 == "deb" {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i + 1) == suite) { print $i; exit }
			}' "$f")
		[ -n "$url" ] && { echo "$url"; return; }
	done
	return 1
}

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
base=$OUT/cache/debootstrap-$codename.tar
if [ ! -s "$base" ]; then
	url=$(mirror "$codename") || { echo "images: no apt source for suite $codename found" >&2; exit 1; }
	log "glibc: debootstrap --variant=minbase $codename from $url (once)"
	r=$WORK/debootstrap
	debootstrap --variant=minbase "$codename" "$r" "$url" >"$WORK/debootstrap.log" 2>&1 || {
		tail -n 30 "$WORK/debootstrap.log" >&2
		exit 1
	}
	rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*
	tar_rootfs "$r" "$base"
	rm -rf "$r"
fi

sum=$(inputs_sum "$base" "${IBV_TOOLS[@]}")
if up_to_date glibc "$sum"; then
	log "glibc: up to date ($OUT/glibc.tar)"
else
	log "glibc: building"
	r=$WORK/glibc
	mkdir -p "$r"
	tar -C "$r" -xf "$base"
	if compgen -G "$r/usr/lib/*/libibverbs.so*" >/dev/null; then
		echo "images: glibc image unexpectedly contains libibverbs" >&2
		exit 1
	fi
	for t in "${IBV_TOOLS[@]}"; do
		[ -x "$t" ] || { echo "images: $t missing (ibverbs-utils)" >&2; exit 1; }
		install -m 0755 "$t" "$r/usr/bin/"
	done
	tar_rootfs "$r" "$OUT/glibc.tar"
	rm -rf "$r"
	publish glibc "$GLIBC_IMAGE"
	echo "$sum" >"$OUT/glibc.stamp"
	log "glibc: done"
fi

# ---------------------------------------------------------------------------
# (c) systemd image: Debian minbase booting systemd as PID 1 (the .deb's
#     units run under it). Only the rootfs tar: the test imports it.
# ---------------------------------------------------------------------------
sum=$(inputs_sum)
if [ -s "$OUT/systemd.tar" ] && [ "$(cat "$OUT/systemd.stamp" 2>/dev/null)" = "$sum" ]; then
	log "systemd: up to date ($OUT/systemd.tar)"
else
	# No mirror argument: mmdebstrap then uses the host's apt sources.
	log "systemd: mmdebstrap --variant=minbase --include=systemd,systemd-sysv,dbus $codename"
	mmdebstrap --format=tar --variant=minbase --include=systemd,systemd-sysv,dbus "$codename" "$OUT/systemd.tar.tmp" >"$WORK/mmdebstrap.log" 2>&1 || {
		tail -n 30 "$WORK/mmdebstrap.log" >&2
		exit 1
	}
	mv "$OUT/systemd.tar.tmp" "$OUT/systemd.tar"
	echo "$sum" >"$OUT/systemd.stamp"
	log "systemd: done"
fi

log "ready in $OUT: $(cd "$OUT" && ls -- *.tar | tr '\n' ' ')"
