#!/usr/bin/env bash
# Shows on a GPU machine that NVIDIA's CDI spec (written there by the real
# `nvidia-ctk cdi generate`) and ours compose: both are applied to one OCI
# config with the CDI library's cache (test/device/cdiapply, the engines'
# code path), and a static runc starts the container, which runs
# `nvidia-smi -L` and checks that the image's OWN libibverbs loads and is
# byte for byte the image's file. docs/gpu-device-run.md says what is real
# and what is fixture (our HCAs: the device machine has none).
#
#   bash test/device/gpu_cdi.sh prepare   # here (root, Go, gcc, network):
#                                         # builds into _out/gpu-run/carry
#   bash test/device/gpu_cdi.sh run       # on the device machine, as root,
#                                         # with _out/gpu-run/carry carried
#
# NO_GPU=1 with run leaves NVIDIA out (a dry run on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."

# R is where the fixture node, our hook and its log live on both machines:
# our spec names these paths, so prepare and run must agree on it.
R=/opt/rdma-cdi-gpu
CARRY=${CARRY:-_out/gpu-run/carry}
CTK_VERSION=${CTK_VERSION:-v1.20.2}
RUNC_VERSION=${RUNC_VERSION:-v1.3.6}
IMAGE_TAR=${IMAGE_TAR:-${RDMA_CDI_IMAGES_DIR:-$HOME/.cache/rdma-cdi/images}/ownstack.tar}
VENDOR=rdma.example.com
LIBDIR=/usr/lib/x86_64-linux-gnu
SPEC_DIR=${SPEC_DIR:-/var/run/cdi}

prepare() {
	set -e
	local c=$CARRY p=$CARRY/../prep v
	[ -s "$IMAGE_TAR" ] || { echo "gpu_cdi: $IMAGE_TAR missing (make images)" >&2; return 1; }
	rm -rf "$c" "$p" && mkdir -p "$c/bin" "$c/cdi" "$p"
	v=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
	# Ours: static, as `make build` makes them. rdma-cdi and mkfixture stay
	# here (they make the fixture and the spec); the hook, its ldconfig
	# sandbox and cdiapply travel.
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/rdma-cdi/rdma-cdi/pkg/cli.version=$v" \
		-o "$p/" ./cmd/rdma-cdi ./test/cmd/mkfixture
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/rdma-cdi/rdma-cdi/pkg/cli.version=$v" \
		-o "$c/bin/" ./cmd/rdma-cdi-hook ./cmd/rdma-cdi-ldsandbox ./test/device/cdiapply
	# NVIDIA's: go-nvml needs cgo (it dlopens libnvidia-ml), so these are
	# dynamic, against this machine's glibc (older than the device's).
	GOBIN=$PWD/$c/bin CGO_ENABLED=1 go install -trimpath \
		-ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${CTK_VERSION#v}" \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$CTK_VERSION" \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$CTK_VERSION"
	# runc: static, cgo for nsexec, no seccomp (no static libseccomp needed).
	GOBIN=$PWD/$c/bin CGO_ENABLED=1 go install -trimpath -tags "netgo osusergo" \
		-ldflags "-s -w -extldflags -static -X main.version=${RUNC_VERSION#v}" \
		"github.com/opencontainers/runc@$RUNC_VERSION"
	file "$c"/bin/* | sed 's/, BuildID[^,]*//'

	# The seed002 fixture node (9 HCAs) at R, with real char device nodes
	# (mknod), and our spec for it, generated here: discovery reads the
	# fixture's sysfs; the netdevs live in a private network namespace.
	rm -rf "$R" && mkdir -p "$R/bin" "$R/log"
	"$p/mkfixture" build -topology test/fixtures/seed002.toml -out "$R/node" -mknod
	printf '[hooks]\nlog_file = "%s/log/hooks.log"\n' "$R" >"$R/node/config.toml"
	unshare --net bash -euo pipefail -c '
		"$3/mkfixture" net -topology test/fixtures/seed002.toml
		"$3/rdma-cdi" --sysfs-root "$2/node/sys" --dev-root "$2/node/dev" --config "$2/node/config.toml" \
			--format json generate --hook-binary "$2/bin/rdma-cdi-hook" --output "$1/cdi/'$VENDOR'-hca.json"
	' _ "$c" "$R" "$p"
	tar --numeric-owner -C / -czf "$c/node.tar.gz" "${R#/}/node"
	# The image with its own rdma-core (test/images/stacks.sh: ownstack).
	gzip -9 <"$IMAGE_TAR" >"$c/ownstack.tar.gz"
	du -sh "$c"
}

# inner is what the container runs (busybox sh in the image).
inner='L='$LIBDIR'
echo "## in the container"
echo "nvidia-smi: $(command -v nvidia-smi || echo none)"
nvidia-smi -L; echo "nvidia_smi_rc=$?"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for f in libibverbs.so.1 libmlx5.so.1; do echo "sha256 $f $(sha256sum <$L/$f | cut -c1-64) -> $(readlink -f $L/$f)"; done
LD_DEBUG=libs ibv_devices 2>&1 | grep -E "calling init: .*(libibverbs|libmlx5|libnl)" | sed "s/^[[:space:]]*[0-9]*:[[:space:]]*//" | sort -u
ibv_devices >/dev/null 2>&1; echo "ibv_devices_rc=$? (0 or 1: libibverbs loaded and asked the kernel; 127: not loadable)"
echo "mlx5probe: $(mlx5probe 2>&1 | head -n1)"
echo "dev/infiniband: $(ls /dev/infiniband | tr "\n" " ")"
ls -l /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm
echo "dev/nvidia*: $(ls /dev/ | grep nvidia | tr "\n" " ")"
echo "nvidia mounts: $(grep -c nvidia /proc/self/mountinfo)"
echo "memlock: $(ulimit -l)"
grep CapEff /proc/self/status
[ -x /usr/local/bin/cudacheck ] && cudacheck
echo "--- /etc/nccl.conf"; cat /etc/nccl.conf 2>&1
echo "--- ld.so.conf.d"; ls /etc/ld.so.conf.d/'

# cudacheck ROOTFS: where the host has nvcc, a small CUDA program (cudart
# linked in) goes to ROOTFS/usr/local/bin (the overlay's upper layer): a
# kernel launch in the container, through the libcuda NVIDIA's spec mounts.
cudacheck() {
	local nvcc src=/tmp/gpu-cdi-cudacheck.cu
	nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || { echo "(no nvcc: no CUDA check)"; return 0; }
	cat >"$src" <<'CU'
#include <cstdio>
__global__ void add(int *x) { x[threadIdx.x] += threadIdx.x; }
int main() {
	int h[32] = {0}, *d, sum = 0;
	cudaDeviceProp p;
	cudaError_t e = cudaGetDeviceProperties(&p, 0);
	if (e != cudaSuccess) { printf("cudacheck: %s\n", cudaGetErrorString(e)); return 1; }
	cudaMalloc(&d, sizeof h);
	cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
	add<<<1, 32>>>(d);
	e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
	for (int i = 0; i < 32; i++) sum += h[i];
	printf("cudacheck: %s sm_%d%d, kernel sum %d (want 496), %s\n", p.name, p.major, p.minor, sum, cudaGetErrorString(e));
	return sum == 496 ? 0 : 1;
}
CU
	if "$nvcc" -O2 -gencode arch=compute_90,code=sm_90 -cudart static -Xcompiler -static-libstdc++,-static-libgcc \
		-o /tmp/gpu-cdi-cudacheck "$src"; then
		install -D -m 0755 /tmp/gpu-cdi-cudacheck "$1/usr/local/bin/cudacheck"
		echo "cudacheck built with $("$nvcc" --version | tail -n1); needs: $(ldd /tmp/gpu-cdi-cudacheck | awk '{print $1}' | tr '\n' ' ')"
	else
		echo "(nvcc failed: no CUDA check)"
	fi
}

run() {
	local c=$CARRY out=${OUT:-/tmp/gpu-cdi-out} w=/tmp/gpu-cdi b applyrc runcrc
	mkdir -p "$out"
	[ "$(id -u)" -eq 0 ] || { echo "gpu_cdi: run as root" >&2; return 1; }
	echo "## device: $(uname -r) $(. /etc/os-release; echo "$PRETTY_NAME")"
	[ -z "${NO_GPU:-}" ] && nvidia-smi -L
	echo "host rdma-core: $(ls $LIBDIR/libibverbs.so.1.* 2>/dev/null | xargs -r -n1 basename)"
	# Our side: the fixture node and our hook where our spec says; the
	# tools beside it (nothing of the host's PATH is replaced).
	rm -rf "$R" && mkdir -p "$R/log" && tar -C / -xzf "$c/node.tar.gz" && mkdir -p "$R/bin"
	install -m 0755 "$c"/bin/* "$R/bin/"
	export PATH=$R/bin:$PATH
	nvidia-ctk --version | head -n1; runc --version | head -n2 | tr '\n' ' '; echo
	mkdir -p "$SPEC_DIR" && rm -f "$SPEC_DIR/nvidia.yaml" "$SPEC_DIR/$VENDOR-hca.json"
	cp "$c/cdi/$VENDOR-hca.json" "$SPEC_DIR/"
	local devices=("$VENDOR/hca=all")
	if [ -z "${NO_GPU:-}" ]; then
		echo "## the host's driver"
		head -n1 /proc/driver/nvidia/version
		echo "nvidia-smi: $(command -v nvidia-smi); ldconfig: $(ldconfig -p | grep -E 'libnvidia-ml.so.1|libcuda.so.1' | tr -s ' \t' ' ' | tr '\n' ';')"
		echo "## nvidia-ctk cdi generate"
		nvidia-ctk cdi generate --nvidia-cdi-hook-path="$R/bin/nvidia-cdi-hook" \
			--output="$SPEC_DIR/nvidia.yaml" || echo "nvidia-ctk cdi generate: rc=$?"
		if [ ! -s "$SPEC_DIR/nvidia.yaml" ]; then
			# libnvidia-ml outside the linker cache: show nvidia-ctk where.
			local ml
			ml=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libnvidia-ml.so.1 2>/dev/null | head -n1)
			echo "retrying with LD_LIBRARY_PATH=${ml%/*} (libnvidia-ml.so.1 at $ml)"
			LD_LIBRARY_PATH=${ml%/*} nvidia-ctk cdi generate --nvidia-cdi-hook-path="$R/bin/nvidia-cdi-hook" \
				--output="$SPEC_DIR/nvidia.yaml" || echo "nvidia-ctk cdi generate: rc=$?"
		fi
		nvidia-ctk cdi list
		# The whole spec comes back in $OUT; here what it holds.
		echo "--- $SPEC_DIR/nvidia.yaml: $(grep -c hostPath "$SPEC_DIR/nvidia.yaml") hostPaths; its hooks:"
		awk '/- hookName:/{h=$3} /path:/{p=$2} /^ *- nvidia-cdi-hook$/{getline; print h, p, $2}' "$SPEC_DIR/nvidia.yaml" | sort | uniq -c
		grep -E "^kind|^ *- name:" "$SPEC_DIR/nvidia.yaml" | tr -s ' \n' ' '; echo
		devices=("nvidia.com/gpu=0" "${devices[@]}")
	fi
	cp "$SPEC_DIR"/nvidia.yaml "$SPEC_DIR/$VENDOR-hca.json" "$out/" 2>/dev/null

	# The bundle: the image's rootfs as an overlay's lower layer (as an
	# engine has it), so the image's files can be checked untouched after.
	umount "$w/bundle/rootfs" "$w" 2>/dev/null; rm -rf "$w" && mkdir -p "$w"
	mount -t tmpfs -o size=1g tmpfs "$w" # overlay's upper layer may not sit on an overlay
	mkdir -p "$w/lower" "$w/upper" "$w/work" "$w/bundle/rootfs"
	b=$w/bundle
	tar --numeric-owner -C "$w/lower" -xzf "$c/ownstack.tar.gz"
	mount -t overlay overlay -o "lowerdir=$w/lower,upperdir=$w/upper,workdir=$w/work" "$b/rootfs" ||
		{ echo "(no overlay: a copy of the image)"; cp -a "$w/lower/." "$b/rootfs/"; }
	echo "## the image's own files, before"
	for f in libibverbs.so.1 libmlx5.so.1; do
		echo "sha256 $f $(sha256sum <"$w/lower$LIBDIR/$f" | cut -c1-64) -> $(readlink "$w/lower$LIBDIR/$f")"
	done | tee "$w/before"
	cudacheck "$b/rootfs"
	(cd "$b" && runc spec)
	python3 - "$b/config.json" "$inner" <<'PY'
import json, sys
p, script = sys.argv[1], sys.argv[2]
c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/sh", "-c", script]
# NVIDIA's spec mounts its tools at the host's path (/usr/local/nvidia/bin
# on this machine); CUDA images put that in PATH, so this one does too.
c["process"]["env"] = ["PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"]
c["root"]["readonly"] = False
c["hostname"] = "gpu-cdi"
json.dump(c, open(p, "w"), indent=1)
PY
	echo "## cdiapply (the CDI library's cache.InjectDevices): ${devices[*]}"
	cdiapply -spec-dir "$SPEC_DIR" -config "$b/config.json" "${devices[@]}"; applyrc=$?
	echo "cdiapply_rc=$applyrc"
	cp "$b/config.json" "$out/config.json"

	echo "## runc run"
	timeout 180 runc --root /run/gpu-cdi-runc run --bundle "$b" gpu-cdi >"$w/inner.log" 2>&1; runcrc=$?
	cat "$w/inner.log"
	echo "runc_rc=$runcrc"
	runc --root /run/gpu-cdi-runc delete -f gpu-cdi >/dev/null 2>&1
	umount "$b/rootfs" 2>/dev/null

	echo "## the image's own files, after (lower layer)"
	for f in libibverbs.so.1 libmlx5.so.1; do
		echo "sha256 $f $(sha256sum <"$w/lower$LIBDIR/$f" | cut -c1-64) -> $(readlink "$w/lower$LIBDIR/$f")"
	done | tee "$w/after"
	echo "## what the hooks wrote in the upper layer"
	(cd "$w/upper" && find . -type f -o -type c | sort | head -40)
	echo "--- our hook log"; cat "$R/log/hooks.log" 2>&1

	echo "## summary"
	{
		grep -E "^GPU [0-9]+:" "$w/inner.log" || echo "nvidia-smi -L: no GPU line"
		grep -E "^nvidia_smi_rc=|^cudacheck:|^ibv_devices_rc=|^mlx5probe:|^memlock:|^calling init" "$w/inner.log"
		local f s1 s2
		for f in libibverbs.so.1 libmlx5.so.1; do
			s1=$(grep "^sha256 $f " "$w/before" | cut -d' ' -f3)
			s2=$(grep "^sha256 $f " "$w/inner.log" | cut -d' ' -f3)
			if [ -n "$s1" ] && [ "$s1" = "$s2" ]; then echo "$f in the container = the image's own ($s1)"; else echo "$f DIFFERS: image $s1, container $s2"; fi
		done
		cmp -s "$w/before" "$w/after" && echo "image layer unchanged after the run" || echo "image layer CHANGED"
		echo "cdiapply_rc=$applyrc runc_rc=$runcrc"
	} | tee "$out/summary"
	umount "$w" 2>/dev/null
}

case ${1:-run} in
prepare) prepare ;;
run) mkdir -p "${OUT:-/tmp/gpu-cdi-out}" && run 2>&1 | tee "${OUT:-/tmp/gpu-cdi-out}/gpu-cdi.log" ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
