#!/usr/bin/env bash
# `make bench`: every whole-process comparison, each in ONE invocation of
# bench/abrun that interleaves the commands (A B A B ...) and reports
# medians and ratios. The results replace the part of BENCHMARKS.md between
# the bench:results markers; the rest of the file (findings) is kept. A
# part's guard that fails (bench/podman.sh) makes the run exit 1 after
# that.
#
#   bench/run.sh [list generate hooks podman watch metrics]   (default: all)
#   ROUNDS=21 (rounds per comparison; SCALE_ROUNDS=11 for the scaling table)
#   BENCH_OUT=BENCHMARKS.md
#
# Fixtures are built in $BENCH_TMP (tmpfs, removed at the end); podman's
# storage is kept in _out/bench/podman between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export REPO BENCH_TMP BENCH_DIR ROUNDS BENCH_VENDOR SCALE_ROUNDS=${SCALE_ROUNDS:-11}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(list generate podman hooks watch metrics)
OUT=${BENCH_OUT:-BENCHMARKS.md}

mkdir -p "$BENCH_TMP" "$BENCH_DIR"
trap 'rm -rf "$BENCH_TMP"' EXIT
for p in abrun floor mksynth nophook; do
	CGO_ENABLED=0 go build -trimpath -o "$BIN/$p" "./bench/$p"
done
[ -x "$BIN/rdma-cdi" ] && [ -x "$BIN/rdma-cdi-agent" ] && [ -x "$BIN/mkfixture" ] || { log "run 'make build' first"; exit 1; }

results=$BENCH_TMP/results.md
{
	echo "<!-- bench:results:begin (written by bench/run.sh; edit outside these markers) -->"
	echo "## Results"
	echo
	echo "- command: \`make bench\` (bench/run.sh ${parts[*]}), $ROUNDS interleaved rounds per comparison ($SCALE_ROUNDS for the scaling table)"
	machine
	echo
} >"$results"
start=$SECONDS
for p in "${parts[@]}"; do
	log "$p"
	bash "bench/$p.sh" >>"$results"
done
echo "Whole run: $((SECONDS - start)) s." >>"$results"
echo "<!-- bench:results:end -->" >>"$results"

# Splice into BENCHMARKS.md.
if [ -f "$OUT" ] && grep -q '^<!-- bench:results:begin' "$OUT"; then
	awk -v r="$results" '
		/^<!-- bench:results:begin/ { while ((getline l < r) > 0) print l; skip = 1; next }
		/^<!-- bench:results:end/ { skip = 0; next }
		!skip' "$OUT" >"$OUT.tmp"
	mv "$OUT.tmp" "$OUT"
else
	{ [ -f "$OUT" ] && cat "$OUT" && echo; cat "$results"; } >"$OUT.tmp"
	mv "$OUT.tmp" "$OUT"
fi
log "results written to $OUT ($((SECONDS - start)) s)"
# A guard (bench/podman.sh: our start time against the peer's) fails the
# run once its figures are written.
if [ -s "$BENCH_TMP/guards-failed" ]; then
	log "guard failed:"
	cat "$BENCH_TMP/guards-failed" >&2
	exit 1
fi
