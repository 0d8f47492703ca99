#!/usr/bin/env bash
# The metrics endpoint's cost:
#   - CPU per scrape of a 256-HCA node, beside a scrape with no ports (the
#     Go and process collectors alone), from BenchmarkScrape in one run;
#   - the steady-state RSS of `rdma-cdi-agent watch` on that node with metrics on
#     and scraped every 200 ms, against the same watch with metrics off,
#     alternating off and on for ROUNDS_RSS rounds; both regenerate 5 times
#     meanwhile.
#
#   bench/metrics.sh       prints a Markdown section on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS_RSS=${ROUNDS_RSS:-5}
SCRAPES=${SCRAPES:-50}
echo "### 6. Metrics"
echo
[ "$(id -u)" -eq 0 ] || { log "metrics: needs root"; exit 1; }

out=$(cd "$REPO" && go test ./pkg/metrics -run '^$' -bench BenchmarkScrape -benchtime 100x 2>&1) || { echo "$out" >&2; exit 1; }
cpu() { echo "$out" | awk -v n="hcas=$1" '$1 ~ n { for (i = 2; i < NF; i++) if ($(i + 1) == "cpu-ms/scrape") print $i }'; }
size() { echo "$out" | awk -v n="hcas=$1" '$1 ~ n { for (i = 2; i < NF; i++) if ($(i + 1) == "bytes/scrape") print $i }'; }
c0=$(cpu 0) c256=$(cpu 256)
echo "**CPU per scrape** (\`go test ./pkg/metrics -bench BenchmarkScrape -benchtime 100x\`, 100 scrapes each, process CPU"
echo "of every thread): 256 single-port HCAs **${c256} ms** ($(size 256) bytes), no ports ${c0} ms ($(size 0) bytes): the"
echo "ports cost $(awk -v a="$c256" -v b="$c0" 'BEGIN { printf "%.1f", a - b }') ms, $(awk -v a="$c256" -v b="$c0" 'BEGIN { printf "%.0f", (a - b) * 1000 / 256 }') µs per port (state, phys_state, rate and 12 counter files). Goal: under 50 ms."
echo

D=$(synthetic 256 4)
W=$BENCH_TMP/metrics
mkdir -p "$W"
WATCH=
trap 'kill $WATCH 2>/dev/null || true' EXIT
# rss METRICS: starts watch (metrics on 127.0.0.1:PORT when METRICS is 1),
# waits for the spec, scrapes SCRAPES times if on, settles, prints VmRSS KiB.
rss() {
	local port=$((19400 + RANDOM % 500))
	rm -rf "$W/spec" && mkdir -p "$W/spec"
	{
		printf '[cdi]\nvendor = "%s"\nspec_dir = "%s/spec"\n[watch]\nrescan_interval = "1h"\n' "$BENCH_VENDOR" "$W"
		printf '[metrics]\nhook_socket = "%s/events.sock"\n' "$W"
		[ "$1" = 1 ] && printf 'address = "127.0.0.1:%s"\n' "$port"
	} >"$W/config.toml"
	"$BIN/rdma-cdi-agent" --log-level=error --config "$W/config.toml" --sysfs-root "$D/sys" --dev-root "$D/dev" watch --no-netlink --no-uevents >"$W/watch.log" 2>&1 &
	WATCH=$!
	for _ in $(seq 100); do [ -s "$W/spec/$BENCH_VENDOR-hca.yaml" ] && break; sleep 0.1; done
	[ -s "$W/spec/$BENCH_VENDOR-hca.yaml" ] || { log "metrics: no spec:"; cat "$W/watch.log" >&2; exit 1; }
	# Both runs regenerate every 10th step (SIGHUP: discovery and spec, as
	# events and rescans do), so each has collected its garbage alike: an
	# idle Go process keeps its start-up garbage until a GC, which the
	# scrapes alone would trigger.
	for i in $(seq "$SCRAPES"); do
		if [ "$1" = 1 ]; then
			curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" || { log "metrics: scrape failed"; cat "$W/watch.log" >&2; exit 1; }
		fi
		[ $((i % 10)) = 0 ] && kill -HUP "$WATCH"
		sleep 0.2
	done
	sleep 2
	awk '/^VmRSS/ {print $2}' "/proc/$WATCH/status"
	kill "$WATCH" && wait "$WATCH" 2>/dev/null || true
	WATCH=
}
off=() on=()
for _ in $(seq "$ROUNDS_RSS"); do
	off+=("$(rss 0)")
	on+=("$(rss 1)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
moff=$(median "${off[@]}") mon=$(median "${on[@]}")
echo "**Steady-state RSS of \`rdma-cdi watch\`** on the same 256-HCA node, $ROUNDS_RSS rounds alternating metrics off and on"
echo "($SCRAPES steps 200 ms apart, a regeneration every 10th, and on, a scrape each; then 2 s of rest; VmRSS, medians): off $(awk -v k="$moff" 'BEGIN { printf "%.1f", k / 1024 }') MiB,"
echo "on $(awk -v k="$mon" 'BEGIN { printf "%.1f", k / 1024 }') MiB: **+$(awk -v a="$mon" -v b="$moff" 'BEGIN { printf "%.1f", (a - b) / 1024 }') MiB** with metrics ($(awk -v a="$mon" -v b="$moff" 'BEGIN { printf "%.2f", a / b }')x). Goal: under 5 MB."
echo
