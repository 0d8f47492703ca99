# Shared by the bench scripts (sourced). Everything lives under $BENCH_DIR;
# nothing outside it is touched except the CDI spec in /var/run/cdi, which
# uses a vendor of its own and is removed on exit.

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# The test images `make images` builds, cached per machine (the Makefile's IMAGES_DIR).
IMAGES=${RDMA_CDI_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-cdi/images}
BIN=$REPO/bin
# Fixture trees go to tmpfs (real sysfs is in memory too, and building the
# 256x256 node on disk takes minutes); podman's storage goes to disk.
BENCH_TMP=${BENCH_TMP:-/dev/shm/rdma-cdi-bench.$$}
BENCH_DIR=${BENCH_DIR:-$REPO/_out/bench}
ROUNDS=${ROUNDS:-21}
# A vendor of its own: /etc/cdi and /var/run/cdi are shared with whatever
# else runs on the machine (other tests, a real rdma.example.com spec), and
# two specs of one vendor and class would make every CDI lookup fail.
BENCH_VENDOR=${BENCH_VENDOR:-rdma-bench.example.com}

log() { echo "bench: $*" >&2; }

# fixture NAME: builds the bundled topology NAME with real device nodes
# (mknod) under $BENCH_TMP/NAME once; prints the dir.
fixture() {
	local d=$BENCH_TMP/$1
	if [ ! -d "$d/sys" ]; then
		"$BIN/mkfixture" build -topology "$1" -out "$d" -mknod >&2
	fi
	echo "$d"
}

# seed002_spec DIR: writes DIR/config.toml (the bench vendor, specs in
# DIR/spec, hook log DIR/hooks.log) and the JSON spec `rdma-cdi generate`
# gives the seed002 fixture with it. Sets F (the fixture dir) and CFG.
seed002_spec() {
	F=$(fixture seed002)
	CFG=$1/config.toml
	cat >"$CFG" <<EOF
[cdi]
vendor = "$BENCH_VENDOR"
spec_dir = "$1/spec"
[hooks]
log_file = "$1/hooks.log"
EOF
	"$BIN/rdma-cdi" --log-level=error --config "$CFG" --sysfs-root "$F/sys" --dev-root "$F/dev" generate --format json
}

# synthetic D G: a synthetic node of D devices and G GIDs per port.
synthetic() {
	local d=$BENCH_TMP/synthetic-$1x$2
	if [ ! -d "$d/sys" ]; then
		"$BIN/mksynth" -devices "$1" -gids "$2" -out "$d"
	fi
	echo "$d"
}

machine() {
	echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $(uname -r), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
	echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine shares its CPUs; medians of interleaved rounds keep ratios fair)"
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)$(git -C "$REPO" diff --quiet HEAD -- pkg cmd bench 2>/dev/null || echo '-dirty'), $(go version | cut -d' ' -f3)"
}
