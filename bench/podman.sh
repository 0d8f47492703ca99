#!/usr/bin/env bash
# Container start overhead: `podman run --rm IMAGE true` with
# --device VENDOR/hca=all (the CDI spec `rdma-cdi generate` writes for the
# seed002 fixture, so its one hook runs: create-runtime with the steps
# memlock, user-space and nccl-conf) against the same run without it, for
# both outcomes of the user-space step: the bb image, which has no RDMA
# stack and is lent the host's (the harder case), and the ownstack image,
# which carries its own (nothing lent, no ldconfig); beside the peer
# (bench/peer.sh: NVIDIA's CDI hooks for one GPU).
#
#   bench/podman.sh            prints a Markdown section on stdout
#
# Two parts:
#   - the guard: three interleaved runs with only the two real specs
#     installed; our added time over the peer's, per run, and their median,
#     which must be at most GUARD_RATIO (0.5, issue 53) for the stack-less
#     image. A miss is written to $BENCH_TMP/guards-failed, which makes
#     `make bench` fail once the results are written;
#   - the breakdown: one interleaved run of the same device given with one
#     piece more at a time (device nodes alone, the hook's process start,
#     its load of state and config, each step, the pod-sandbox gate), so
#     each piece's cost is the difference of two neighbours.
# Needs root, podman, runc, jq, gcc (the peer's libraries) and
# $RDMA_CDI_IMAGES_DIR/bb.tar and ownstack.tar (make images).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || { log "podman: needs root"; exit 1; }
for c in podman runc jq; do command -v $c >/dev/null || { log "podman: $c missing"; exit 1; }; done
BB_TAR=$IMAGES/bb.tar
OWN_TAR=$IMAGES/ownstack.tar
for t in "$BB_TAR" "$OWN_TAR"; do [ -s "$t" ] || { log "podman: $t missing (make images)"; exit 1; }; done

P=$BENCH_DIR/podman
mkdir -p "$P"/{root,runroot,hooks.d,tmp,volumes}
cat >"$P/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = "$P/events.log"
hooks_dir = ["$P/hooks.d"]
tmp_dir = "$P/tmp"
volume_path = "$P/volumes"
EOF
cat >"$P/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$P/root"
runroot = "$P/runroot"
EOF
export CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf
PODMAN=(podman --root "$P/root" --runroot "$P/runroot" --storage-driver overlay --cgroup-manager cgroupfs
	--runtime runc --events-backend file --tmpdir "$P/tmp" --hooks-dir "$P/hooks.d")
IMAGE=localhost/rdma-cdi-bench-bb:latest
OWN=localhost/rdma-cdi-bench-ownstack:latest
# Re-imported each run: a rebuilt tar must not be benchmarked as the old one.
"${PODMAN[@]}" import --quiet --change 'CMD ["/bin/sh"]' "$BB_TAR" "$IMAGE" >/dev/null
"${PODMAN[@]}" import --quiet --change 'CMD ["/bin/sh"]' "$OWN_TAR" "$OWN" >/dev/null

seed002_spec "$P"
FULL=$P/spec/$BENCH_VENDOR-hca.json
SPEC=/var/run/cdi/$BENCH_VENDOR-hca.json
mkdir -p /var/run/cdi
source "$(dirname "$0")/peer.sh"
peer_spec "$P/peer"
BREAKDOWN=/var/run/cdi/breakdown-$BENCH_VENDOR-hca.json
GUARD_RATIO=${GUARD_RATIO:-0.5}
cleanup() { rm -f "$SPEC" "/var/run/cdi/$PEER_VENDOR-gpu.json" "$BREAKDOWN"; "${PODMAN[@]}" rm --all --force --time 0 >/dev/null 2>&1 || true; }
trap cleanup EXIT

# sanity runs: the hooks run and succeed; bb is lent the host's libibverbs,
# ownstack keeps its own (mlx5probe needs its MLX5_1.25)
cp "$FULL" "$SPEC"
"${PODMAN[@]}" run --rm --device "$BENCH_VENDOR/hca=all" "$IMAGE" sh -c 'test -e /dev/infiniband/uverbs0 && grep -q NCCL_IB_HCA /etc/nccl.conf && test -s /usr/lib/x86_64-linux-gnu/libibverbs.so.1' ||
	{ log "podman: sanity run failed; hook log:"; tail -20 "$P/hooks.log" >&2; exit 1; }
"${PODMAN[@]}" run --rm --device "$BENCH_VENDOR/hca=all" "$OWN" sh -c 'grep -q NCCL_IB_HCA /etc/nccl.conf && mlx5probe >/dev/null' ||
	{ log "podman: own-stack sanity run failed; hook log:"; tail -20 "$P/hooks.log" >&2; exit 1; }
# and the peer's hooks do their work: ldconfig's soname link and create-symlinks' link
"${PODMAN[@]}" run --rm --device "$PEER_DEVICE" "$IMAGE" sh -c "test -L $PEER_LIBDIR/libcuda.so.1 && test -L $PEER_LIBDIR/libcuda.so && grep -q libcuda.so.1 /etc/ld.so.cache" ||
	{ log "podman: the peer's sanity run failed"; exit 1; }


RUN="podman --root $P/root --runroot $P/runroot --storage-driver overlay --cgroup-manager cgroupfs --runtime runc --events-backend file --tmpdir $P/tmp --hooks-dir $P/hooks.d run --rm"
NODES=$(jq '[.containerEdits.deviceNodes[]?, (.devices[] | select(.name == "all") | .containerEdits.deviceNodes[])] | length' "$FULL")
echo "### 3. Container start overhead (podman $(podman --version | cut -d' ' -f3), runc $(runc --version | sed -n 1p | cut -d' ' -f3))"
echo
echo "\`podman run --rm IMAGE true\` (network none) with and without \`--device $BENCH_VENDOR/hca=all\` (the seed002 spec from \`rdma-cdi generate\`, 9 HCAs: $NODES device nodes, one hook process: create-runtime running memlock, user-space and nccl-conf), for the two outcomes of user-space: \`bb\` has no RDMA stack and is lent the host's $(jq '[.containerEdits.hooks[0].args[] | select(. == "--lend")] | length' "$FULL") files, its linker cache refreshed by the sandboxed ldconfig (the harder case); \`ownstack\` (trixie's rdma-core 56.1) keeps its own: nothing mounted, no ldconfig. Added time is the median over the rounds of the start minus its own image's plain start in the same round."
echo
echo "Peer: one GPU through the NVIDIA container toolkit's CDI hooks, \`nvidia-cdi-hook\` $PEER_HOOK_VERSION: four createContainer hooks (enable-cuda-compat, create-symlinks, update-ldcache, disable-device-node-modification), 5 device nodes, 7 driver libraries (bench/peer.sh; no NVIDIA driver here, so disable-device-node-modification finds no /proc/driver/nvidia/params and returns at once, as on a host without the driver loaded)."
echo

# The guard: only the two real specs installed, as on a node.
echo "**Guard** (three interleaved runs of $((ROUNDS * 2)) rounds; target: our added time at most $GUARD_RATIO of the peer's, the median of the three runs, for bb)"
echo
echo "| run | plain ms | bb added ms | ownstack added ms | peer added ms | bb / peer | ownstack / peer |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for run in 1 2 3; do
	"$BIN/abrun" -rounds "$((ROUNDS * 2))" -json "$BENCH_TMP/guard-$run.json" \
		-c "plain=$RUN $IMAGE true" \
		-c "host-stack=$RUN --device $BENCH_VENDOR/hca=all $IMAGE true" \
		-c "own-plain=$RUN $OWN true" \
		-c "own-stack=$RUN --device $BENCH_VENDOR/hca=all $OWN true" \
		-c "peer=$RUN --device $PEER_DEVICE $IMAGE true" >"$BENCH_TMP/guard-$run.md"
	jq -r --arg run "$run" '.peer.paired_diff_ms as $peer | .["host-stack"].paired_diff_ms as $host |
		(.["own-stack"].paired_diff_ms - .["own-plain"].paired_diff_ms) as $own |
		def r: . * 100 | round / 100;
		"| \($run) | \(.plain.median_ms | r) | \($host | r) | \($own | r) | \($peer | r) | \($host / $peer | r) | \($own / $peer | r) |"' "$BENCH_TMP/guard-$run.json"
done
echo
verdict=$(jq -rs --argjson max "$GUARD_RATIO" '
	def mid: sort | .[length / 2 | floor];
	(map(.["host-stack"].paired_diff_ms / .peer.paired_diff_ms) | mid) as $bb |
	(map((.["own-stack"].paired_diff_ms - .["own-plain"].paired_diff_ms) / .peer.paired_diff_ms) | mid) as $own |
	"\(if $bb <= $max then "met" else "MISSED" end) bb / peer \($bb * 100 | round / 100), ownstack / peer \($own * 100 | round / 100)"' \
	"$BENCH_TMP"/guard-[123].json)
echo "Guard: **${verdict%% *}** (medians of the three runs: ${verdict#* })."
echo
if [ "${verdict%% *}" != met ]; then
	echo "podman: our added start time (bb) is over $GUARD_RATIO of the peer's: ${verdict#* }" >>"$BENCH_TMP/guards-failed"
fi
echo "The first run in full:"
echo
cat "$BENCH_TMP/guard-1.md"

# The breakdown: one spec of its own, the device nodes in its top-level
# edits (given with any of its devices) and one device per variant, which
# adds an env entry (CDI refuses a device without edits) and its hooks.
# Every CDI start, the peer's included, reads this spec too, so each
# starts a little slower than in the guard.
GATE_DIR=$P/pod-network
mkdir -p "$GATE_DIR"
echo '{"version":1,"sandboxes":["rdma-cdi-bench-pod"]}' >"$GATE_DIR/pod-sandboxes.json"
GATE_CFG=$P/config-pod-network.toml
{ cat "$CFG"; printf '[pod_network]\nenabled = true\nstate_dir = "%s"\n' "$GATE_DIR"; } >"$GATE_CFG"
jq --arg kind "breakdown-$BENCH_VENDOR/hca" --arg gatecfg "$GATE_CFG" '
	.containerEdits.hooks[0] as $h |
	[.containerEdits.deviceNodes[]?, (.devices[] | select(.name == "all") | .containerEdits.deviceNodes[])] as $nodes |
	def steps($s): $h | .args |= (index("--steps") as $i | .[$i + 1] = $s);
	def variant($name; $hooks): {name: $name, containerEdits: {env: ["RDMA_CDI_BENCH_VARIANT=" + $name], hooks: $hooks}};
	{cdiVersion, kind: $kind, containerEdits: {deviceNodes: $nodes}, devices: [
		variant("nodes"; []),
		variant("hook-start"; [$h | .args = ["rdma-cdi-hook", "--version"]]),
		variant("hook-start-cc"; [$h | .args = ["rdma-cdi-hook", "--version"] | .hookName = "createContainer"]),
		variant("hook-load"; [steps("")]),
		variant("memlock"; [steps("memlock")]),
		variant("user-space"; [steps("user-space")]),
		variant("nccl-conf"; [steps("nccl-conf")]),
		variant("all"; [steps("memlock,user-space,nccl-conf")]),
		variant("all-debug"; [steps("memlock,user-space,nccl-conf") | .args += ["--log-level=debug"]]),
		variant("gate"; [steps("memlock,user-space,nccl-conf") | .args |= map(if startswith("--config=") then "--config=" + $gatecfg else . end)])
	]}' "$FULL" >"$BREAKDOWN"
B=breakdown-$BENCH_VENDOR/hca
POD="--annotation io.kubernetes.cri.sandbox-id=rdma-cdi-bench-pod"
# the gate passes a listed pod, and refuses one that is not
"${PODMAN[@]}" run --rm $POD --device "$B=gate" "$IMAGE" true ||
	{ log "podman: the pod-sandbox gate refused a listed pod; hook log:"; tail -5 "$P/hooks.log" >&2; exit 1; }
! "${PODMAN[@]}" run --rm --annotation io.kubernetes.cri.sandbox-id=unlisted --device "$B=gate" "$IMAGE" true 2>/dev/null ||
	{ log "podman: the pod-sandbox gate let an unlisted pod start"; exit 1; }
echo
echo "**Breakdown** ($ROUNDS rounds, one interleaved run): the same $NODES device nodes with one piece more at a time, from a spec of its own (\`breakdown-\`); each piece is the difference between two rows' added times."
echo
log_from=$(($(wc -l <"$P/hooks.log") + 1))
"$BIN/abrun" -rounds "$ROUNDS" -json "$BENCH_TMP/breakdown.json" \
	-c "plain=$RUN $IMAGE true" \
	-c "nodes=$RUN --device $B=nodes $IMAGE true" \
	-c "hook-start=$RUN --device $B=hook-start $IMAGE true" \
	-c "hook-start-cc=$RUN --device $B=hook-start-cc $IMAGE true" \
	-c "hook-load=$RUN --device $B=hook-load $IMAGE true" \
	-c "memlock=$RUN --device $B=memlock $IMAGE true" \
	-c "user-space=$RUN --device $B=user-space $IMAGE true" \
	-c "nccl-conf=$RUN --device $B=nccl-conf $IMAGE true" \
	-c "all=$RUN --device $B=all $IMAGE true" \
	-c "all-debug=$RUN --device $B=all-debug $IMAGE true" \
	-c "gate=$RUN $POD --device $B=gate $IMAGE true" \
	-c "own-plain=$RUN $OWN true" \
	-c "own-all=$RUN --device $B=all $OWN true" \
	-c "peer=$RUN --device $PEER_DEVICE $IMAGE true" >"$BENCH_TMP/breakdown.md"
echo "| piece | ms | rows |"
echo "|---|---:|---|"
jq -r 'with_entries(.value = .value.paired_diff_ms) as $d |
	def row($what; $a; $b): "| \($what) | \(($d[$a] - (if $b == "" then 0 else $d[$b] end)) * 100 | round / 100) | \($a)\(if $b == "" then "" else " - " + $b end) |";
	row("device nodes alone"; "nodes"; "plain"),
	row("the hook process: exec, Go runtime, runc running it (`rdma-cdi-hook --version`)"; "hook-start"; "nodes"),
	row("the same process as a createContainer hook (the peer'"'"'s stage)"; "hook-start-cc"; "nodes"),
	row("its load: config, OCI state, config.json, the container process and root (no step)"; "hook-load"; "hook-start"),
	row("memlock"; "memlock"; "hook-load"),
	row("user-space: the decision, the lend, the sandboxed ldconfig"; "user-space"; "hook-load"),
	row("nccl-conf"; "nccl-conf"; "hook-load"),
	row("the three steps in one process (nccl-conf beside the others)"; "all"; "hook-load"),
	row("the pod-sandbox gate (pod networking on, a listed pod)"; "gate"; "all"),
	row("**ours, bb** (all, from this spec)"; "all"; "plain"),
	row("**ours, ownstack**: the decision, nothing lent"; "own-all"; "own-plain"),
	row("**the peer**"; "peer"; "plain")' "$BENCH_TMP/breakdown.json"
echo
# Inside the hook: what its debug lines (pkg/hooks TookField) say each part
# took, from main's load of the state to its exit, in the all-debug rows.
echo "Inside the hook (\`all-debug\`: the same hook at \`--log-level=debug\`, whose lines say what each part took; medians over its $ROUNDS runs and the warm-up's; the parts beside each other overlap):"
echo
echo "| part | median ms |"
echo "|---|---:|"
tail -n "+$log_from" "$P/hooks.log" | awk '
	/level=debug/ && /took_ms=/ {
		msg = $0; sub(/.* msg=/, "", msg)
		if (msg ~ /^"/) { sub(/^"/, "", msg); sub(/".*/, "", msg) } else sub(/ .*/, "", msg)
		step = ""; if (match($0, / step=[^ ]+/)) step = substr($0, RSTART + 6, RLENGTH - 6)
		ms = $0; sub(/.*took_ms=/, "", ms); sub(/ .*/, "", ms)
		key = (step == "" ? msg : step ": " msg); v[key, ++n[key]] = ms + 0
	}
	END {
		split("loaded|memlock: step done|user-space: linker cache update prepared|user-space: lent|user-space: linker cache updated|user-space: step done|nccl-conf: step done|done", order, "|")
		for (i = 1; i in order; i++) {
			k = order[i]; c = n[k]; if (!c) continue
			for (j = 1; j <= c; j++) a[j] = v[k, j]
			for (x = 1; x <= c; x++) for (y = x + 1; y <= c; y++) if (a[y] < a[x]) { t = a[x]; a[x] = a[y]; a[y] = t }
			printf "| %s | %.2f |\n", k, (c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2)
		}
	}'
echo
echo "The breakdown's run in full:"
echo
cat "$BENCH_TMP/breakdown.md"
