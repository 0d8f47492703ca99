#!/usr/bin/env bash
# Container start overhead: `podman run --rm` with --device VENDOR/hca=all
# (the CDI spec `rdma-cdi generate` writes for the seed002 fixture, so its
# hook runs: create-runtime with the steps memlock, user-space and
# nccl-conf) against the same run without the device, for both outcomes of
# the user-space step: the bb image, which has no RDMA stack and is lent
# the host's, and the ownstack image, which carries its own (nothing lent,
# no ldconfig); and against the peer (bench/peer.sh), interleaved.
#
#   bench/podman.sh            prints a Markdown section on stdout
#
# Then the same with one step or hook at a time (the spec's hooks rewritten),
# to show which dominates, and with hooks that do nothing, for the floor. Needs root, podman, runc, and
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
OURS_BARE=/var/run/cdi/bare-$BENCH_VENDOR-hca.json
OURS_LEGACY=/var/run/cdi/legacy-$BENCH_VENDOR-hca.json
PEER_BARE=/var/run/cdi/bare-$PEER_VENDOR-gpu.json
cleanup() { rm -f "$SPEC" "/var/run/cdi/$PEER_VENDOR-gpu.json" "$OURS_BARE" "$PEER_BARE" "$OURS_LEGACY"; "${PODMAN[@]}" rm --all --force --time 0 >/dev/null 2>&1 || true; }
trap cleanup EXIT

# install_spec FILTER: the generated spec with its hooks passed through a
# jq filter on the hook list.
install_spec() {
	jq ".containerEdits.hooks |= ($1)" "$FULL" >"$SPEC.tmp" && mv "$SPEC.tmp" "$SPEC"
}
# only_step STEPS: the filter that makes the create-runtime hook run only
# STEPS.
only_step() { echo "map(select(.args[2] == \"create-runtime\") | .args |= (index(\"--steps\") as \$i | .[\$i + 1] = \"$1\"))"; }

# sanity runs: the hooks run and succeed; bb is lent the host's libibverbs,
# ownstack keeps its own (mlx5probe needs its MLX5_1.25)
install_spec '.'
"${PODMAN[@]}" run --rm --device "$BENCH_VENDOR/hca=all" "$IMAGE" sh -c 'test -e /dev/infiniband/uverbs0 && grep -q NCCL_IB_HCA /etc/nccl.conf && test -s /usr/lib/x86_64-linux-gnu/libibverbs.so.1' ||
	{ log "podman: sanity run failed; hook log:"; tail -20 "$P/hooks.log" >&2; exit 1; }
"${PODMAN[@]}" run --rm --device "$BENCH_VENDOR/hca=all" "$OWN" sh -c 'grep -q NCCL_IB_HCA /etc/nccl.conf && mlx5probe >/dev/null' ||
	{ log "podman: own-stack sanity run failed; hook log:"; tail -20 "$P/hooks.log" >&2; exit 1; }
# and the peer's hooks do their work: ldconfig's soname link and create-symlinks' link
"${PODMAN[@]}" run --rm --device "$PEER_DEVICE" "$IMAGE" sh -c "test -L $PEER_LIBDIR/libcuda.so.1 && test -L $PEER_LIBDIR/libcuda.so && grep -q libcuda.so.1 /etc/ld.so.cache" ||
	{ log "podman: the peer's sanity run failed"; exit 1; }

RUN="podman --root $P/root --runroot $P/runroot --storage-driver overlay --cgroup-manager cgroupfs --runtime runc --events-backend file --tmpdir $P/tmp --hooks-dir $P/hooks.d run --rm"
echo "### 3. Container start overhead (podman $(podman --version | cut -d' ' -f3), runc $(runc --version | sed -n 1p | cut -d' ' -f3))"
echo
echo "\`podman run --rm IMAGE true\` (network none) with and without \`--device $BENCH_VENDOR/hca=all\` (the seed002 spec from \`rdma-cdi generate\`, 9 HCAs: $(jq '[.containerEdits.deviceNodes[], (.devices[] | select(.name == "all") | .containerEdits.deviceNodes[])] | length' "$FULL") device nodes, one hook process: create-runtime running memlock, user-space and nccl-conf), for the two outcomes of user-space: \`host-stack\` is the bb image, without an RDMA stack, lent the host's $(jq '[.containerEdits.hooks[0].args[] | select(. == "--lend")] | length' "$FULL") files and its linker cache refreshed; \`own-stack\` is the ownstack image (trixie's rdma-core 56.1), whose own stack runs untouched: nothing mounted, no ldconfig. Each is compared with its own image's plain start."
echo
echo "Peer: one GPU through the NVIDIA container toolkit's CDI hooks, \`nvidia-cdi-hook\` $PEER_HOOK_VERSION: four createContainer hooks (enable-cuda-compat, create-symlinks, update-ldcache, disable-device-node-modification), 5 device nodes, 7 driver libraries (bench/peer.sh; no NVIDIA driver here, so disable-device-node-modification finds no /proc/driver/nvidia/params and returns at once, as on a host without the driver loaded)."
echo
# legacy: the spec as it was before the hook decided per container (issue
# 23): the engine mounts the host's libraries into every container, the
# image's own stack or not, and the hook refreshes the linker cache.
jq --arg kind "legacy-$BENCH_VENDOR/hca" '.kind = $kind | .containerEdits.hooks[0].args as $a |
	.containerEdits.mounts = [range(0; $a | length) | select($a[.] == "--lend") | $a[. + 1] | split("=") |
		{hostPath: .[1], containerPath: .[0], options: ["ro", "nosuid", "nodev", "bind"]}] |
	.containerEdits.hooks[0].args = [range(0; $a | length) | select($a[.] != "--lend" and (. == 0 or $a[. - 1] != "--lend")) | $a[.] |
		if . == "memlock,user-space,nccl-conf" then "memlock,update-ldcache,nccl-conf" else . end]' "$FULL" >"$OURS_LEGACY"
"${PODMAN[@]}" run --rm --device "legacy-$BENCH_VENDOR/hca=all" "$OWN" sh -c '! mlx5probe 2>/dev/null' ||
	{ log "podman: the legacy spec does not shadow the image's stack"; exit 1; }
echo "\`legacy\` rows: the spec as it was before the decision per container, its libraries mounted by the engine into every container and update-ldcache run: on ownstack it shadows the image's own stack (mlx5probe fails)."
echo
# The targets' table gets twice the rounds: its differences are a few
# milliseconds on starts that vary by tens.
"$BIN/abrun" -rounds "$((ROUNDS * 2))" -title "all hooks" -json "$BENCH_TMP/podman.json" \
	-c "plain=$RUN $IMAGE true" \
	-c "host-stack=$RUN --device $BENCH_VENDOR/hca=all $IMAGE true" \
	-c "own-plain=$RUN $OWN true" \
	-c "own-stack=$RUN --device $BENCH_VENDOR/hca=all $OWN true" \
	-c "legacy-bb=$RUN --device legacy-$BENCH_VENDOR/hca=all $IMAGE true" \
	-c "legacy-own=$RUN --device legacy-$BENCH_VENDOR/hca=all $OWN true" \
	-c "peer=$RUN --device $PEER_DEVICE $IMAGE true"
rm -f "$OURS_LEGACY"
# Added time: the median over the rounds of (case - its base) in the same
# round, which a slow drift of the machine does not move; own-plain's
# paired difference to plain is taken out for own-stack.
jq -r '.peer.paired_diff_ms as $peer |
	(["host-stack", "plain"], ["own-stack", "own-plain"]) as [$case, $base] |
	(.[$case].paired_diff_ms - .[$base].paired_diff_ms) as $ours |
	(.["legacy-" + (if $case == "own-stack" then "own" else "bb" end)].paired_diff_ms - .[$base].paired_diff_ms) as $legacy |
	(.[$case].median_ms / .[$base].median_ms) as $r | ($ours / $peer) as $q |
	"\($case): \($ours | round) ms added (median of the paired differences), legacy \($legacy | round) ms; target ratio to plain <= 1.15 \(if $r <= 1.15 then "**met**" else "**missed**" end) (\($r * 100 | round / 100) of the medians); target added time <= 1/2 of the peer'"'"'s \(if $q <= 0.5 then "**met**" else "**missed**" end) (+\($ours * 10 | round / 10) ms vs the peer'"'"'s +\($peer * 10 | round / 10) ms: \($q * 100 | round / 100)).\n"' "$BENCH_TMP/podman.json"
echo

# The split: both specs again beside copies without their hooks (vendors of
# their own). Every CDI start reads every spec file, so the copies are
# there for this run only: four files make each start read more than a
# node with the two real specs does.
jq --arg kind "bare-$BENCH_VENDOR/hca" '.kind = $kind | .containerEdits.hooks = []' "$FULL" >"$OURS_BARE"
jq --arg kind "bare-$PEER_VENDOR/gpu" '.kind = $kind | .containerEdits.hooks = []' "/var/run/cdi/$PEER_VENDOR-gpu.json" >"$PEER_BARE"
echo "Devices vs hooks: the same two specs and copies without their hooks (\`-bare\`) in one interleaved run (ours lends its libraries from the hook, so its bare copy is the device nodes alone; the peer's keeps its library mounts); with four spec files to read, every CDI start here costs more than above."
echo
"$BIN/abrun" -rounds "$ROUNDS" -title "split" -json "$BENCH_TMP/split.json" \
	-c "plain=$RUN $IMAGE true" \
	-c "device=$RUN --device $BENCH_VENDOR/hca=all $IMAGE true" \
	-c "device-bare=$RUN --device bare-$BENCH_VENDOR/hca=all $IMAGE true" \
	-c "peer=$RUN --device $PEER_DEVICE $IMAGE true" \
	-c "peer-bare=$RUN --device bare-${PEER_DEVICE} $IMAGE true"
rm -f "$OURS_BARE" "$PEER_BARE"
jq -r '"Split (medians, bb): ours \(."device-bare".median_ms - .plain.median_ms | round) ms devices + \(.device.median_ms - ."device-bare".median_ms | round) ms its one hook (with the lend); the peer \(."peer-bare".median_ms - .plain.median_ms | round) ms + \(.peer.median_ms - ."peer-bare".median_ms | round) ms its four hooks."' "$BENCH_TMP/split.json"
echo

# Which step dominates: the same device with one step or hook kept at a
# time; and the floors: no hook (the device nodes and mounts alone), one
# /bin/true hook (any hook process), one nophook (any Go hook process).
echo "Per step (bb, lent the host's set): the spec's hooks rewritten to one hook running one step, or to one hook that does nothing, or to none; each row is its own interleaved pair with the plain run."
echo
echo "| hook runs | median ms plain | median ms with device | ratio |"
echo "|---|---:|---:|---:|"
for variant in "no hook" /bin/true nophook memlock user-space nccl-conf memlock,user-space,nccl-conf; do
	case $variant in
	"no hook") install_spec '[]' ;;
	/bin/true) install_spec '[.[0] | .path = "/bin/true" | .args = ["true"]]' ;;
	nophook) install_spec "[.[0] | .path = \"$BIN/nophook\" | .args = [\"nophook\"]]" ;;
	*) install_spec "$(only_step $variant)" ;;
	esac
	"$BIN/abrun" -rounds "$ROUNDS" -c "plain=$RUN $IMAGE true" -c "dev=$RUN --device $BENCH_VENDOR/hca=all $IMAGE true" |
		awk -F'|' -v v="$variant" '$2 ~ /plain/ {p=$3} $2 ~ /dev/ {d=$3; r=$7} END {gsub(/ /,"",p); gsub(/ /,"",d); gsub(/ /,"",r); printf "| %s | %s | %s | %s |\n", v, p, d, r}'
done
echo
