# Sourced by bench/podman.sh: the peer case, a container given one GPU
# through the NVIDIA container toolkit's own CDI hooks (nvidia-cdi-hook
# v1.20.1, built once into $BENCH_DIR/bin), with a spec shaped like
# `nvidia-ctk cdi generate`'s: four createContainer hooks (enable-cuda-compat,
# create-symlinks, update-ldcache, disable-device-node-modification), 5 device
# nodes (mknod'ed, never opened) and 7 driver libraries (real ELF shared
# objects with the driver's sonames, built with gcc), so that update-ldcache
# and create-symlinks have their real work to do. Needs gcc (cgo, and the
# libraries).
#
#   peer_spec DIR      writes the spec to /var/run/cdi; sets PEER_DEVICE

PEER_HOOK_VERSION=v1.20.1
PEER_DRIVER=570.86.15
PEER_VENDOR=nvidia-bench.example.com
PEER_LIBS=(libcuda libcudadebugger libnvidia-ml libnvidia-ptxjitcompiler libnvidia-nvvm libnvidia-opencl libnvidia-cfg)
PEER_LIBDIR=/usr/lib/x86_64-linux-gnu

peer_hook() {
	local bin=$BENCH_DIR/bin/nvidia-cdi-hook-$PEER_HOOK_VERSION
	if [ ! -x "$bin" ]; then
		mkdir -p "$BENCH_DIR/bin"
		GOBIN=$BENCH_DIR/bin go install -trimpath \
			"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$PEER_HOOK_VERSION" >&2
		mv "$BENCH_DIR/bin/nvidia-cdi-hook" "$bin"
	fi
	echo "$bin"
}

peer_spec() {
	local dir=$1 hook i lib mounts=() nodes=()
	hook=$(peer_hook)
	mkdir -p "$dir/lib" "$dir/dev"
	echo 'int nvbench(void) { return 0; }' >"$dir/lib/stub.c"
	for lib in "${PEER_LIBS[@]}"; do
		local file=$dir/lib/$lib.so.$PEER_DRIVER
		[ -s "$file" ] || gcc -shared -fPIC -Wl,-soname,"$lib.so.1" -o "$file" "$dir/lib/stub.c"
		mounts+=("{\"hostPath\":\"$file\",\"containerPath\":\"$PEER_LIBDIR/$lib.so.$PEER_DRIVER\",\"options\":[\"ro\",\"nosuid\",\"nodev\",\"rbind\",\"rprivate\"]}")
	done
	local -A minors=([nvidia0]=0 [nvidiactl]=255 [nvidia-modeset]=254)
	for i in nvidia0 nvidiactl nvidia-modeset nvidia-uvm nvidia-uvm-tools; do
		if [ ! -e "$dir/dev/$i" ]; then
			case $i in
			nvidia-uvm) mknod "$dir/dev/$i" c 509 0 ;;
			nvidia-uvm-tools) mknod "$dir/dev/$i" c 509 1 ;;
			*) mknod "$dir/dev/$i" c 195 "${minors[$i]}" ;;
			esac
		fi
		nodes+=("{\"path\":\"/dev/$i\",\"hostPath\":\"$dir/dev/$i\"}")
	done
	local env='["NVIDIA_CTK_DEBUG=false"]'
	hookjson() { echo "{\"hookName\":\"createContainer\",\"path\":\"$hook\",\"args\":[\"nvidia-cdi-hook\",$1],\"env\":$env}"; }
	local hooks=(
		"$(hookjson "\"enable-cuda-compat\",\"--host-driver-version=$PEER_DRIVER\"")"
		"$(hookjson "\"create-symlinks\",\"--link\",\"libcuda.so.1::$PEER_LIBDIR/libcuda.so\"")"
		"$(hookjson "\"update-ldcache\",\"--folder\",\"$PEER_LIBDIR\"")"
		"$(hookjson '"disable-device-node-modification"')"
	)
	join() { local IFS=,; echo "$*"; }
	cat >"/var/run/cdi/$PEER_VENDOR-gpu.json" <<JSON
{"cdiVersion":"0.5.0","kind":"$PEER_VENDOR/gpu",
 "devices":[{"name":"0","containerEdits":{"deviceNodes":[${nodes[0]}]}}],
 "containerEdits":{"env":["NVIDIA_VISIBLE_DEVICES=void"],"deviceNodes":[$(join "${nodes[@]:1}")],
  "mounts":[$(join "${mounts[@]}")],"hooks":[$(join "${hooks[@]}")]}}
JSON
	PEER_DEVICE=$PEER_VENDOR/gpu=0
}
