# Sourced by the engine build scripts.
#
# module_source MODULE VERSION DEST [PREPARE]: a writable copy of a Go
# module's source, from the module proxy, at DEST; made once, atomically
# (DEST.tmp, then renamed). PREPARE, a function, runs inside the copy
# before the rename.
module_source() {
	local module=$1 version=$2 dest=$3 prepare=${4:-} dir
	[ -d "$dest" ] && return 0
	dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "no source directory for $module $version" >&2; return 1; }
	rm -rf "$dest.tmp"
	cp -r "$dir" "$dest.tmp"
	chmod -R u+w "$dest.tmp"
	if [ -n "$prepare" ]; then (cd "$dest.tmp" && "$prepare"); fi
	mv "$dest.tmp" "$dest"
}
