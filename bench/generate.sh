#!/usr/bin/env bash
# 1. `rdma-cdi generate --output -` (whole process) on the seed002 fixture
#    against bench/floor, which only reads the sysfs files generate needs.
# 2. generate on synthetic nodes of 1, 8, 64, 256 devices with 4 and 256
#    GIDs per port, interleaved, with the time per device x GID slot.
#
#   bench/generate.sh      prints Markdown sections on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

F=$(fixture seed002)
# An empty config file: the defaults, whatever /etc/rdma-cdi holds.
: >"$BENCH_TMP/empty.toml"
GEN="$BIN/rdma-cdi --log-level=error --config=$BENCH_TMP/empty.toml"
slots=$(ls "$F/sys/class/infiniband/mlx5_0/ports/1/gids" | wc -l)
echo "### 1. generate vs the floor (seed002: 9 HCAs, $slots GID slots per port)"
echo
echo "floor: \`bench/floor\`, a Go program that only reads the sysfs files generate needs (class listing, port state/phys_state/link_layer/rate, every GID slot, types/ndevs of the used ones, uverbs/umad/issm ibdev/dev/port, rdma_cm) with raw open/read/close, GID slots relative to the port directory, and prints nothing. generate also does netlink (default route, netdevs), the host's ld.so.cache and RDMA libraries, the CDI render and YAML. \`version\` is \`rdma-cdi --version\`: process start alone. Target: generate within 3x of the floor."
echo
"$BIN/abrun" -rounds "$ROUNDS" -title "seed002" -json "$BENCH_TMP/floor.json" \
	-c "floor=$BIN/floor $F/sys" \
	-c "generate=$GEN --sysfs-root $F/sys --dev-root $F/dev generate --output -" \
	-c "version=$BIN/rdma-cdi --version"
jq -r '(.generate.median_ms / .floor.median_ms) as $r |
	"Target generate <= 3x floor: \(if $r <= 3 then "**met**" else "**missed**" end) (\($r * 100 | round / 100)x; CPU \(.generate.cpu_ms / .floor.cpu_ms * 100 | round / 100)x)."' "$BENCH_TMP/floor.json"
echo

echo "### 2. generate scaling (synthetic nodes)"
echo
echo "\`fixture.Synthetic(D, G)\`: D single-port RoCE devices, G GID slots per port, all used (3 reads per slot: the worst case; a real port has 255 slots with a few used, 1 read per empty slot). Placeholder device nodes. Units: D x G. The 256x256 floor row is \`bench/floor\` on that node."
echo
args=()
for d in 1 8 64 256; do
	for g in 4 256; do
		s=$(synthetic $d $g)
		args+=(-c "${d}x${g}=$GEN --sysfs-root $s/sys --dev-root $s/dev generate --output -" -units "${d}x${g}=$((d * g))")
	done
done
s=$(synthetic 256 256)
args+=(-c "floor-256x256=$BIN/floor $s/sys" -units "floor-256x256=$((256 * 256))")
json=$BENCH_TMP/scaling.json
# The 256x256 rows take seconds each: fewer rounds keep make bench short.
"$BIN/abrun" -rounds "${SCALE_ROUNDS:-11}" -title "generate --output -, devices x GIDs per port" -json "$json" "${args[@]}"
# Linearity: the cost of one more GID slot (G 4 -> 256) at each node size,
# and of one more device (D 64 -> 256) at each table size.
jq -r '
	. as $r | def m(k): $r[k].median_ms;
	"Marginal cost, from the medians above: per extra GID slot (G 4 -> 256): " +
	([1, 8, 64, 256] | map(. as $d | "D=\($d): \((((m("\($d)x256") - m("\($d)x4")) * 1000 / ($d * 252)) * 100 | round) / 100) µs") | join(", ")) +
	"; per extra device (D 64 -> 256): " +
	([4, 256] | map(. as $g | "G=\($g): \((((m("256x\($g)") - m("64x\($g)")) * 1000 / 192) * 10 | round) / 10) µs") | join(", ")) +
	". Linear growth shows as a flat per-slot figure once the fixed process cost is amortised.",
	"",
	"Target 256 devices well under 1 s: \(if $r["256x4"].median_ms < 1000 then "**met**" else "**missed**" end) at 4 GIDs per port (\($r["256x4"].median_ms | round) ms, CPU \($r["256x4"].cpu_ms | round) ms); \(if $r["256x256"].median_ms < 1000 then "**met**" else "**missed**" end) at 256 used GIDs per port (\($r["256x256"].median_ms | round) ms, CPU \($r["256x256"].cpu_ms | round) ms; the floor alone \($r["floor-256x256"].median_ms | round) ms: 196,608 attribute reads)."' "$json"
echo
