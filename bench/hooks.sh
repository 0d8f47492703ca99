#!/usr/bin/env bash
# Each hook alone, as the engine runs it: `rdma-cdi hook create-runtime`
# with one step or all three, `rdma-cdi hook precreate`, with the
# arguments `rdma-cdi generate` puts in the spec, a real OCI state (or, for
# precreate, a real config.json) on stdin, and a live "container" process:
# `sleep` in its own network namespace with its cwd at a bb rootfs, as runc
# leaves its init before pivot_root. Time and peak memory (ru_maxrss of the
# hook and what it waited for: ldconfig for update-ldcache), interleaved
# with `rdma-cdi-hook --version` (the hook binary's process start alone) as
# the baseline, beside `rdma-cdi --version` (the full binary's).
#
#   bench/hooks.sh        prints a Markdown section on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || { log "hooks: needs root"; exit 1; }
for c in runc jq unshare; do command -v $c >/dev/null || { log "hooks: $c missing"; exit 1; }; done
BB_TAR=$IMAGES/bb.tar
[ -s "$BB_TAR" ] || { log "hooks: $BB_TAR missing (make images)"; exit 1; }

H=$BENCH_TMP/hooks
rm -rf "$H" && mkdir -p "$H/bundle/rootfs" "$H/spec"
tar -C "$H/bundle/rootfs" -xf "$BB_TAR"
seed002_spec "$H"
SPEC=$H/spec/$BENCH_VENDOR-hca.json

# config.json: runc's default (own network namespace) plus what the CDI
# device "all" adds: its device nodes, so nccl-conf finds all 9 HCAs. The
# root is writable, as an engine's is: runc's default read-only root would
# make update-ldcache and nccl-conf skip their work.
runc spec --bundle "$H/bundle"
jq --slurpfile cdi "$SPEC" '
	.root.readonly = false
	| .linux.devices = [$cdi[0].devices[] | select(.name == "all") | .containerEdits.deviceNodes[] |
		{path, type, major, minor, fileMode, uid: 0, gid: 0}]
	| .process.env += ["NCCL_DEBUG=INFO"]' "$H/bundle/config.json" >"$H/config.json.tmp"
mv "$H/config.json.tmp" "$H/bundle/config.json"
# precreate gets the config podman proposes for a container that asks with
# its env; the answer (stdout) is discarded.
jq '.process.env += ["RDMA_VISIBLE_DEVICES=all"]' "$H/bundle/config.json" >"$H/precreate.json"

(cd "$H/bundle/rootfs" && exec unshare --net sleep 3600) &
CTR=$!
trap 'kill $CTR 2>/dev/null || true' EXIT
sleep 0.2
printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":%d,"bundle":"%s","annotations":{"io.container.manager":"libpod"}}' \
	"$CTR" "$H/bundle" >"$H/state.json"

# hook_cmd STEPS: the spec's create-runtime hook argv, running STEPS.
hook_cmd() {
	jq -r --arg steps "$1" '.containerEdits.hooks[] | select(.args[2] == "create-runtime") |
		(.args | index("--steps")) as $i | .args[$i + 1] = $steps | ([.path] + .args[1:]) | join(" ")' "$SPEC"
}
ROOTS="--config=$CFG --dev-root=$F/dev --sysfs-root=$F/sys"
ALL=memlock,update-ldcache,nccl-conf
for h in memlock update-ldcache nccl-conf $ALL; do
	[ -n "$(hook_cmd $h)" ] || { log "hooks: the spec has no create-runtime hook"; exit 1; }
	# one checked run, so a broken setup fails here with the hook's message
	$(hook_cmd $h) <"$H/state.json" >/dev/null 2>&1 || { log "hooks: $h failed:"; $(hook_cmd $h) <"$H/state.json" >&2 || true; exit 1; }
done
"$BIN/rdma-cdi" hook precreate $ROOTS <"$H/precreate.json" 2>/dev/null | jq -e '.linux.devices | length > 0' >/dev/null

echo "### 4. Each hook alone"
echo
echo "A real OCI state on stdin (precreate: podman's proposed config.json asking for RDMA_VISIBLE_DEVICES=all), the seed002 node, the arguments the generated spec carries: its create-runtime hook with one step, or all three (what a container start runs). The spec's hooks run \`rdma-cdi-hook\` (the hook commands alone, \`cmd/rdma-cdi-hook\`). Baseline: \`rdma-cdi-hook --version\`, its process start alone; \`full-version\` is \`rdma-cdi --version\`, the whole binary's. Target: under 20 MiB peak each."
echo
"$BIN/abrun" -rounds "$ROUNDS" -title "hooks" -json "$BENCH_TMP/hooks.json" \
	-c "version=$BIN/rdma-cdi-hook --version" \
	-c "full-version=$BIN/rdma-cdi --version" \
	-c "memlock=$(hook_cmd memlock)" -in "memlock=$H/state.json" \
	-c "update-ldcache=$(hook_cmd update-ldcache)" -in "update-ldcache=$H/state.json" \
	-c "nccl-conf=$(hook_cmd nccl-conf)" -in "nccl-conf=$H/state.json" \
	-c "create-runtime=$(hook_cmd $ALL)" -in "create-runtime=$H/state.json" \
	-c "precreate=$BIN/rdma-cdi hook precreate $ROOTS" -in "precreate=$H/precreate.json" \
	-c "ldconfig=/sbin/ldconfig -r $H/bundle/rootfs /usr/lib/x86_64-linux-gnu"
echo "(ldconfig: the host's \`ldconfig -r ROOT DIR\` alone, what update-ldcache runs.)"
echo
jq -r '[to_entries[] | select(.key != "version" and .key != "full-version" and .key != "ldconfig")] as $h |
	"Target under 20 MiB peak each: \(if ($h | all(.value.rss_mib < 20)) then "**met**" else "**missed**" end) (" +
	($h | map("\(.key) \(.value.rss_mib * 10 | round / 10)") | join(", ")) + " MiB)."' "$BENCH_TMP/hooks.json"
echo
