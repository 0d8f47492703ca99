#!/usr/bin/env bash
# Peak memory of `rdma-cdi-agent watch` under 10,000 netlink address events (no
# growth): watch runs on the seed002 fixture in a network namespace of its
# own holding a veth pair; `ip -batch` adds and deletes addresses on it
# (one RTM_NEWADDR or RTM_DELADDR each). VmRSS and VmHWM are read from
# /proc at the start, after a warm-up of 2,000 events and after all 10,000.
#
#   bench/watch.sh         prints a Markdown section on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

EVENTS=${EVENTS:-10000}
echo "### 5. Peak memory"
echo
if [ -s "$BENCH_TMP/floor.json" ] && [ -s "$BENCH_TMP/scaling.json" ]; then
	jq -rs '"generate (max RSS over the rounds above): seed002 \(.[0].generate.rss_mib * 10 | round / 10) MiB; synthetic 256x4 \(.[1]["256x4"].rss_mib * 10 | round / 10) MiB, 256x256 \(.[1]["256x256"].rss_mib * 10 | round / 10) MiB (65,536 GIDs in the model)."' \
		"$BENCH_TMP/floor.json" "$BENCH_TMP/scaling.json"
	echo
fi
echo "#### watch under $EVENTS address events"
echo
[ "$(id -u)" -eq 0 ] || { log "watch: needs root"; exit 1; }

W=$BENCH_TMP/watch
rm -rf "$W" && mkdir -p "$W/spec"
F=$(fixture seed002)
cat >"$W/config.toml" <<EOF
[cdi]
vendor = "$BENCH_VENDOR"
spec_dir = "$W/spec"
[watch]
debounce = "100ms"
rescan_interval = "1h"
EOF
# A network namespace held by a sleeping process, with a veth pair.
unshare --net sleep 3600 &
HOLDER=$!
WATCH=
trap 'kill $WATCH $HOLDER 2>/dev/null || true' EXIT
sleep 0.2
NS=/proc/$HOLDER/ns/net
nsenter --net="$NS" ip link add bench0 type veth peer name bench1
nsenter --net="$NS" ip link set bench0 up && nsenter --net="$NS" ip link set bench1 up
# gctrace: each GC prints the live heap it left ("gc N @t: ... A->B->C MB").
GODEBUG=gctrace=1 nsenter --net="$NS" "$BIN/rdma-cdi-agent" --log-level=debug --config "$W/config.toml" --sysfs-root "$F/sys" --dev-root "$F/dev" watch \
	>"$W/watch.log" 2>&1 &
WATCH=$!
for _ in $(seq 50); do [ -s "$W/spec/$BENCH_VENDOR-hca.yaml" ] && break; sleep 0.1; done
[ -s "$W/spec/$BENCH_VENDOR-hca.yaml" ] || { log "watch: no spec written:"; cat "$W/watch.log" >&2; exit 1; }

# mem: VmRSS and VmHWM (MiB), then the live heap after the last GC (MB).
mem() {
	awk '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} END {printf "VmRSS %.1f VmHWM %.1f ", r / 1024, h / 1024}' "/proc/$WATCH/status"
	grep -oE '[0-9]+->[0-9]+->[0-9]+ MB' "$W/watch.log" | tail -1 | sed -E 's/.*->([0-9]+) MB/heap \1/' || true
}
# events N FIRST: N/2 addresses added, then the same deleted.
events() {
	local n=$(($1 / 2)) i
	{
		for ((i = 0; i < n; i++)); do echo "addr add 10.$(($2 + i / 65536)).$((i / 256 % 256)).$((i % 256))/32 dev bench0"; done
		for ((i = 0; i < n; i++)); do echo "addr del 10.$(($2 + i / 65536)).$((i / 256 % 256)).$((i % 256))/32 dev bench0"; done
	} >"$W/batch"
	nsenter --net="$NS" ip -batch "$W/batch"
	sleep 1 # debounce, the last generation
}
cpu() { awk '{print ($14 + $15) * 10}' "/proc/$WATCH/stat"; } # utime+stime in ms (USER_HZ 100)
start=$(mem)
events 2000 1
warm=$(mem)
c0=$(cpu)
events $((EVENTS - 2000)) 2
end=$(mem)
c1=$(cpu)
kill -0 "$WATCH" || { log "watch exited:"; cat "$W/watch.log" >&2; exit 1; }
gens=$(grep -c "trigger=" "$W/watch.log" || true)
echo "| point | VmRSS MiB | VmHWM (peak) MiB | live heap after last GC, MB |"
echo "|---|---:|---:|---:|"
for p in "start:$start" "after 2,000 events:$warm" "after $EVENTS events:$end"; do
	name=${p%%:*}
	set -- ${p#*:}
	echo "| $name | $2 | $4 | ${6:-} |"
done
echo
growth=$(awk -v a="$warm" -v b="$end" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.1f", y[2] - x[2]}')
echo "Target no growth: $(awk -v g="$growth" 'BEGIN {print (g < 1.0) ? "**met**" : "**missed**"}') (VmRSS $growth MiB from 2,000 to $EVENTS events; $(grep -c '^gc ' "$W/watch.log") GCs, live heap after each: $(grep -oE '[0-9]+->[0-9]+->[0-9]+ MB' "$W/watch.log" | sed -E 's/.*->([0-9]+) MB/\1/' | sort -n | uniq -c | awk '{printf "%s%s MB x%s", sep, $2, $1; sep=", "}'))."
echo
echo "CPU of watch for the last $((EVENTS - 2000)) events: $((c1 - c0)) ms. Generations (debounced): $gens; the spec did not change, so none was written."
echo
