#!/usr/bin/env bash
# install.sh: install rdma-cdi on a node without a package manager.
#
# Installs the binaries (PREFIX/bin/rdma-cdi, the rdma-container-runtime
# symlink, and rdma-cdi-hook, its ldconfig sandbox rdma-cdi-ldsandbox and
# rdma-cdi-agent from beside --binary), the config (/etc/rdma-cdi/config.toml, never overwritten), the
# systemd units, the podman precreate hook (/etc/containers/oci/hooks.d),
# the engine snippets (PREFIX/share/rdma-cdi/engines, to merge by hand), the
# man pages and the bash, zsh and fish completions (written by the binary
# itself), and then writes the CDI spec with `rdma-cdi generate`.
#
# Idempotent: a second run changes nothing and says so. Paths from the
# repository's deploy/ files that name /usr/bin/rdma-* are rewritten to
# PREFIX/bin/rdma-*.
set -euo pipefail

usage() {
	cat <<'USAGE'
usage: install.sh [options] [-- extra args for `rdma-cdi generate`]

  --binary PATH   rdma-cdi binary to install (default: bin/rdma-cdi of the repository)
  --prefix DIR    install prefix (default /usr/local)
  --root DIR      install under DIR instead of / (tests, images); systemd is left alone
  --dry-run       say what would change, change nothing
  --uninstall     remove what install.sh installed (the config is kept)
  --purge         with --uninstall: also remove /etc/rdma-cdi and the logs
  --no-generate   do not run `rdma-cdi generate` at the end
  --no-enable     do not enable/start rdma-cdi-watch.service
  -h, --help      this text
USAGE
}

ROOT=/
PREFIX=/usr/local
BINARY=""
DRY=0
UNINSTALL=0
PURGE=0
GENERATE=1
ENABLE=1
GEN_ARGS=()

while [ $# -gt 0 ]; do
	case "$1" in
	--binary) BINARY=$2; shift 2 ;;
	--binary=*) BINARY=${1#*=}; shift ;;
	--prefix) PREFIX=$2; shift 2 ;;
	--prefix=*) PREFIX=${1#*=}; shift ;;
	--root) ROOT=$2; shift 2 ;;
	--root=*) ROOT=${1#*=}; shift ;;
	--dry-run) DRY=1; shift ;;
	--uninstall) UNINSTALL=1; shift ;;
	--purge) PURGE=1; UNINSTALL=1; shift ;;
	--no-generate) GENERATE=0; shift ;;
	--no-enable) ENABLE=0; shift ;;
	--) shift; GEN_ARGS=("$@"); break ;;
	-h | --help) usage; exit 0 ;;
	*) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done

case "$PREFIX" in /*) ;; *) echo "install.sh: --prefix must be absolute" >&2; exit 2 ;; esac
ROOT=$(cd "$ROOT" 2>/dev/null && pwd) || { echo "install.sh: --root $ROOT does not exist" >&2; exit 2; }
R=${ROOT%/}

DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(dirname "$DEPLOY")
# Only the checkout's own build outputs: never the current directory, which
# may be anyone's (/tmp), and whose binary would be installed as root's.
if [ -z "$BINARY" ]; then
	for b in "$REPO/bin/rdma-cdi" "$REPO/_out/rdma-cdi"; do
		if [ -x "$b" ]; then BINARY=$b; break; fi
	done
fi

BIN_DIR=$R$PREFIX/bin
BIN=$BIN_DIR/rdma-cdi
# The hooks' own binary, installed from beside --binary when it is there;
# generate names it in the spec's hooks (else rdma-cdi itself).
HOOK_BIN=$BIN_DIR/rdma-cdi-hook
# The hook's ldconfig sandbox, which the hook runs from beside itself (else
# it re-executes itself, a slower container start).
SANDBOX_BIN=$BIN_DIR/rdma-cdi-ldsandbox
# The agents' binary (rdma-cdi-watch.service runs it), from beside --binary.
AGENT_BIN=$BIN_DIR/rdma-cdi-agent
LINK=$BIN_DIR/rdma-container-runtime
CONF_DIR=$R/etc/rdma-cdi
CONF=$CONF_DIR/config.toml
UNIT_DIR=$R/etc/systemd/system
UNITS=(rdma-cdi-watch.service rdma-cdi-generate.service)
HOOKS_DIR=$R/etc/containers/oci/hooks.d
HOOK=rdma-cdi-precreate.json
SHARE=$R$PREFIX/share/rdma-cdi
LOG_DIR=$R/var/log/rdma-cdi
SPEC_DIRS=("$R/var/run/cdi" "$R/etc/cdi")
MAN_DIR=$R$PREFIX/share/man/man1
# Where each shell looks for a command's completion: SHELL=PATH.
COMPLETIONS=(
	"bash=$R$PREFIX/share/bash-completion/completions/rdma-cdi"
	"zsh=$R$PREFIX/share/zsh/site-functions/_rdma-cdi"
	"fish=$R$PREFIX/share/fish/vendor_completions.d/rdma-cdi.fish"
)

changes=0
units_changed=0

say() { printf '%s\n' "$*"; }
act() {
	# act DESCRIPTION CMD...: run (or, with --dry-run, only announce) a change.
	local what=$1; shift
	changes=$((changes + 1))
	if [ "$DRY" = 1 ]; then say "would $what"; return 0; fi
	"$@"
	say "$what"
}

# subst FILE: the file with /usr/bin/rdma-* rewritten to PREFIX/bin/rdma-*.
subst() { sed "s#/usr/bin/rdma-#$PREFIX/bin/rdma-#g" "$1"; }

# put SRC DEST MODE [raw]: install SRC's (substituted) content at DEST.
put() {
	local src=$1 dest=$2 mode=$3 raw=${4:-}
	local tmp
	tmp=$(mktemp)
	if [ "$raw" = raw ]; then cat "$src" >"$tmp"; else subst "$src" >"$tmp"; fi
	if [ -f "$dest" ] && [ ! -L "$dest" ] && cmp -s "$tmp" "$dest" && [ "$(stat -c %a "$dest")" = "${mode#0}" ]; then
		rm -f "$tmp"
		return 1
	fi
	act "install $dest" install_atomic "$mode" "$tmp" "$dest"
	rm -f "$tmp"
	return 0
}

# install_atomic MODE SRC DEST: a temporary file beside DEST, renamed over
# it. A container start that runs DEST meanwhile (an upgrade in place) sees
# the old file or the new one, never a missing or half-written one, which
# `install` (unlink, copy, chmod) showed as "no such file" or "permission
# denied".
install_atomic() {
	local mode=$1 src=$2 dest=$3 new
	mkdir -p "$(dirname "$dest")"
	new=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX") || return 1
	if install -m "$mode" "$src" "$new" && mv -f "$new" "$dest"; then
		return 0
	fi
	rm -f "$new"
	return 1
}

# link_atomic TARGET LINK: LINK -> TARGET, replaced by a rename as files are.
link_atomic() {
	local new
	new="$(dirname "$2")/.$(basename "$2").new.$$"
	ln -sfn "$1" "$new" && mv -Tf "$new" "$2"
}

# spec_state: a fingerprint of the spec dirs, to tell whether generate changed anything.
spec_state() {
	local d
	for d in "${SPEC_DIRS[@]}"; do
		if [ -d "$d" ]; then
			find "$d" -maxdepth 1 -type f -printf '%p %m ' -exec sha256sum {} \; 2>/dev/null || true
		fi
	done | sort
}

systemd_live() { [ "$R" = "" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }

install_all() {
	if [ -z "$BINARY" ] || [ ! -x "$BINARY" ]; then
		echo "install.sh: no rdma-cdi binary (build it with make build, or pass --binary PATH)" >&2
		exit 1
	fi
	put "$BINARY" "$BIN" 0755 raw || true
	# Before the hook: a new hook never finds an older sandbox beside it.
	if [ -x "$(dirname "$BINARY")/rdma-cdi-ldsandbox" ]; then
		put "$(dirname "$BINARY")/rdma-cdi-ldsandbox" "$SANDBOX_BIN" 0755 raw || true
	else
		say "no rdma-cdi-ldsandbox beside $BINARY: the hook re-executes itself as the ldconfig sandbox"
	fi
	if [ -x "$(dirname "$BINARY")/rdma-cdi-hook" ]; then
		put "$(dirname "$BINARY")/rdma-cdi-hook" "$HOOK_BIN" 0755 raw || true
	else
		say "no rdma-cdi-hook beside $BINARY: the spec's hooks run rdma-cdi itself"
	fi
	if [ -x "$(dirname "$BINARY")/rdma-cdi-agent" ]; then
		put "$(dirname "$BINARY")/rdma-cdi-agent" "$AGENT_BIN" 0755 raw || true
	elif [ -x "$AGENT_BIN" ]; then
		say "no rdma-cdi-agent beside $BINARY: kept the installed $AGENT_BIN"
	else
		echo "install.sh: no rdma-cdi-agent beside $BINARY (make build builds it; rdma-cdi-watch.service runs it)" >&2
		exit 1
	fi
	if [ "$(readlink "$LINK" 2>/dev/null)" != rdma-cdi ]; then
		act "link $LINK -> rdma-cdi" link_atomic rdma-cdi "$LINK"
	fi
	if [ -e "$CONF" ]; then
		say "kept existing $CONF"
	else
		put "$DEPLOY/bootstrap/config.toml" "$CONF" 0644 raw || true
	fi
	local u
	for u in "${UNITS[@]}"; do
		if put "$DEPLOY/systemd/$u" "$UNIT_DIR/$u" 0644; then units_changed=1; fi
	done
	if [ -f "$DEPLOY/hooks.d/$HOOK" ]; then
		put "$DEPLOY/hooks.d/$HOOK" "$HOOKS_DIR/$HOOK" 0644 || true
	else
		say "no deploy/hooks.d/$HOOK in this tree: podman hook not installed"
	fi
	local f rel
	while IFS= read -r f; do
		rel=${f#"$DEPLOY"/}
		put "$f" "$SHARE/engines/$rel" 0644 || true
	done < <(find "$DEPLOY/docker" "$DEPLOY/containerd" "$DEPLOY/crio" "$DEPLOY/hooks.d" -type f 2>/dev/null | sort)
	put "$DEPLOY/bootstrap/config.toml" "$SHARE/config.toml.example" 0644 raw || true
	install_docs
	if [ ! -d "$LOG_DIR" ]; then
		act "create $LOG_DIR" mkdir -p "$LOG_DIR"
	fi

	if systemd_live; then
		if [ "$units_changed" = 1 ]; then
			act "reload systemd units" systemctl daemon-reload
		fi
		if [ "$ENABLE" = 1 ]; then
			if ! systemctl is-enabled --quiet rdma-cdi-watch.service 2>/dev/null; then
				act "enable rdma-cdi-watch.service" systemctl enable --quiet rdma-cdi-watch.service
			fi
			if ! systemctl is-active --quiet rdma-cdi-watch.service 2>/dev/null; then
				act "start rdma-cdi-watch.service" systemctl start rdma-cdi-watch.service
			elif [ "$units_changed" = 1 ]; then
				act "restart rdma-cdi-watch.service" systemctl restart rdma-cdi-watch.service
			fi
		fi
	else
		say "systemd not managing $ROOT: enable later with systemctl enable --now rdma-cdi-watch.service"
	fi

	if [ "$GENERATE" = 1 ]; then
		local args=(--config "$CONF" generate)
		if [ -n "$R" ]; then args+=(--spec-dir "$R/var/run/cdi"); fi
		args+=("${GEN_ARGS[@]}")
		if [ "$DRY" = 1 ]; then
			say "would run $BIN ${args[*]}"
		else
			local before after
			before=$(spec_state)
			"$BIN" "${args[@]}"
			after=$(spec_state)
			if [ "$before" != "$after" ]; then
				changes=$((changes + 1))
				say "wrote the CDI spec ($BIN ${args[*]})"
			fi
		fi
	fi
}

# install_docs: the man pages and completions the binary writes (with the
# defaults: a broken config on this host must not change them); pages of
# commands the binary no longer has go.
install_docs() {
	local gen f c
	gen=$(mktemp -d)
	"$BINARY" --config /dev/null man "$gen/man1" >/dev/null
	for f in "$gen"/man1/*.1; do
		put "$f" "$MAN_DIR/$(basename "$f")" 0644 raw || true
	done
	for f in "$MAN_DIR"/rdma-cdi*.1; do
		if [ -e "$f" ] && [ ! -e "$gen/man1/$(basename "$f")" ]; then remove "$f"; fi
	done
	for c in "${COMPLETIONS[@]}"; do
		"$BINARY" --config /dev/null completion "${c%%=*}" >"$gen/completion"
		put "$gen/completion" "${c#*=}" 0644 raw || true
	done
	rm -rf "$gen"
}

remove() {
	# remove PATH: delete a file or symlink if present.
	if [ -e "$1" ] || [ -L "$1" ]; then act "remove $1" rm -f "$1"; fi
}

uninstall_all() {
	if systemd_live; then
		local u
		for u in "${UNITS[@]}"; do
			if systemctl is-active --quiet "$u" 2>/dev/null; then act "stop $u" systemctl stop "$u"; fi
			if systemctl is-enabled --quiet "$u" 2>/dev/null; then act "disable $u" systemctl disable --quiet "$u"; fi
		done
	fi
	# Specs whose hooks name this binary would dangle once it is gone.
	local d f
	for d in "${SPEC_DIRS[@]}"; do
		[ -d "$d" ] || continue
		while IFS= read -r f; do
			remove "$f"
		done < <(grep -l -F -e "$PREFIX/bin/rdma-cdi" -e "$BIN" "$d"/*.yaml "$d"/*.json 2>/dev/null || true)
	done
	remove "$LINK"
	remove "$HOOK_BIN"
	remove "$SANDBOX_BIN"
	remove "$AGENT_BIN"
	remove "$BIN"
	for u in "${UNITS[@]}"; do remove "$UNIT_DIR/$u"; done
	remove "$HOOKS_DIR/$HOOK"
	for f in "$MAN_DIR"/rdma-cdi*.1; do remove "$f"; done
	for f in "${COMPLETIONS[@]}"; do remove "${f#*=}"; done
	if [ -d "$SHARE" ]; then act "remove $SHARE" rm -rf "$SHARE"; fi
	if [ "$PURGE" = 1 ]; then
		if [ -d "$CONF_DIR" ]; then act "remove $CONF_DIR" rm -rf "$CONF_DIR"; fi
		if [ -d "$LOG_DIR" ]; then act "remove $LOG_DIR" rm -rf "$LOG_DIR"; fi
	elif [ -e "$CONF" ]; then
		say "kept $CONF (--purge removes it)"
	fi
	if systemd_live && [ "$changes" -gt 0 ] && [ "$DRY" = 0 ]; then
		systemctl daemon-reload
	fi
}

verb=install
if [ "$UNINSTALL" = 1 ]; then verb=uninstall; uninstall_all; else install_all; fi

if [ "$changes" = 0 ]; then
	say "rdma-cdi $verb: nothing to do, everything is already in place"
elif [ "$DRY" = 1 ]; then
	say "rdma-cdi $verb: $changes change(s) would be made (dry run)"
else
	say "rdma-cdi $verb: $changes change(s) made"
fi
