#!/usr/bin/env bash
# `rdma-cdi list` against the show_gids method (bench/show-gids-method.sh)
# on the seed002 fixture (9 RoCE HCAs, 255 GID slots per port), interleaved,
# after checking that both print the same GID rows.
#
#   bench/list.sh          prints a Markdown section on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

F=$(fixture seed002)
: >"$BENCH_TMP/empty.toml"
LIST="$BIN/rdma-cdi --log-level=error --config=$BENCH_TMP/empty.toml --sysfs-root $F/sys --dev-root $F/dev list"
SHOW="bash $REPO/bench/show-gids-method.sh $F/sys"

# The same job: every used GID, with its IPv4 address, RoCE version and
# netdev (white space aside; list's netdevs come from sysfs here too).
rows() { grep '^mlx' | awk '{$1 = $1; print}'; }
if ! diff <($SHOW | rows) <($LIST | sed -n '/^DEV  *PORT  *INDEX  *GID/,$p' | rows) >"$BENCH_TMP/list.diff"; then
	log "list: rdma-cdi list and the show_gids method disagree:"
	cat "$BENCH_TMP/list.diff" >&2
	exit 1
fi
used=$($SHOW | rows | wc -l)
slots=$(for g in "$F"/sys/class/infiniband/*/ports/*/gids; do ls "$g"; done | wc -l)

echo "### 0. list vs show_gids (seed002: 9 RoCE HCAs, $slots GID slots, $used used)"
echo
echo "\`show-gids\` is \`bench/show-gids-method.sh\`: show_gids' method written anew (the script is not in Debian, and not ours to ship): a shell loop with one \`cat\` per GID slot and, per used slot, two more \`cat\`s, a grep, a cut and a printf, each in its own command substitution. Checked before timing: both print the same $used GID rows. \`list\` also prints the ibdev2netdev view (ports, states, rates, netdevs). Target: list at least 100x faster, the median over the rounds of the paired ratio (show-gids / list in the same round)."
echo
"$BIN/abrun" -rounds "$ROUNDS" -title "list" -json "$BENCH_TMP/list.json" \
	-c "show-gids=$SHOW" \
	-c "list=$LIST" \
	-c "version=$BIN/rdma-cdi --version"
jq -r '(1 / .list.paired_ratio) as $x |
	"Target list >= 100x faster than show_gids: \(if $x >= 100 then "**met**" else "**missed**" end) (\($x | round)x, the median of the paired ratios; medians \(.["show-gids"].median_ms | round) ms vs \(.list.median_ms * 100 | round / 100) ms; list'"'"'s process start alone, `rdma-cdi --version`, \(.version.median_ms * 100 | round / 100) ms)."' "$BENCH_TMP/list.json"
echo
