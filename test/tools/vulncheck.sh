#!/usr/bin/env bash
# make vulncheck: govulncheck in source mode, so only a
# vulnerable symbol our code can reach fails it, against a Go vulnerability
# database built on this machine. vuln.go.dev is out of reach here and in CI;
# the Go module proxy is not, and it serves both halves:
#   - golang.org/x/vuln (govulncheck), built into TOOLS_DIR once per version
#     and per Go toolchain: it type-checks the standard library of the go
#     command it runs, and a binary built by an older Go refuses a newer
#     toolchain's sources ("file requires newer Go version");
#   - golang.org/x/vulndb, whose source carries data/osv/GO-*.json. Its
#     cmd/gendb cannot run from the proxy's copy (it opens a git repository,
#     to date each entry by its commits, and the module has no .git), but its
#     cmd/indexdb reads a folder of OSV files, offline, and writes the v1
#     layout govulncheck's file:// source reads: index/db.json,
#     index/modules.json, index/vulns.json and ID/<id>.json. Done once per
#     vulndb version into TOOLS_DIR/vulndb-VERSION.
#
#   GOVULNCHECK_VERSION=v1.9.0 VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018 \
#   TOOLS_DIR=~/.cache/rdma-cdi/tools test/tools/vulncheck.sh [DIR [PATTERN...]]
#
# DIR is the module to scan (default: this checkout), PATTERN its packages
# (default ./...). The exit status is govulncheck's: 0 when no vulnerable
# symbol is reachable, 3 when one is, anything else when the scan failed.
set -euo pipefail
: "${GOVULNCHECK_VERSION:?}" "${VULNDB_VERSION:?}" "${TOOLS_DIR:?}"
GO=${GO:-go}
# The standard library scanned is that of the Go the module's go.mod selects
# (its toolchain line), which takes GOTOOLCHAIN=auto, Go's default; these
# machines' go.env says local, so a direct call gets auto as make's does
# (the Makefile sets it too). Any other value set by the caller stays.
[ "${GOTOOLCHAIN:-local}" != local ] || export GOTOOLCHAIN=auto
dir=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
shift || true
patterns=("$@")
[ ${#patterns[@]} -gt 0 ] || patterns=(./...)
mkdir -p "$TOOLS_DIR"
TOOLS_DIR=$(cd "$TOOLS_DIR" && pwd)

goversion=$(cd "$dir" && $GO env GOVERSION)
bin=$TOOLS_DIR/govulncheck-$GOVULNCHECK_VERSION-$goversion/govulncheck
if [ ! -x "$bin" ]; then
	echo "building govulncheck $GOVULNCHECK_VERSION with $goversion"
	# From the scanned module's folder, so that a GOTOOLCHAIN it selects
	# builds the binary too.
	(cd "$dir" && GOFLAGS= GOBIN=$(dirname "$bin") CGO_ENABLED=0 $GO install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION")
fi

db=$TOOLS_DIR/vulndb-$VULNDB_VERSION
if [ ! -f "$db/index/modules.json" ]; then
	echo "building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION"
	# Outside any module, without the caller's GOFLAGS: neither takes part in
	# fetching or building the generator.
	work=$(mktemp -d "$TOOLS_DIR/.vulndb-XXXXXX")
	trap 'rm -rf "$work"' EXIT
	src=$(cd "$work" && GOFLAGS= $GO mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
		sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$src/data/osv" ] || { echo "no data/osv in golang.org/x/vulndb@$VULNDB_VERSION ($src)" >&2; exit 1; }
	(cd "$work" && GOFLAGS= CGO_ENABLED=0 $GO run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" \
		-vulns "$src/data/osv" -out "$work/db")
	# govulncheck's file source reads the .json files alone: the gzipped
	# copies indexdb writes beside them (for an HTTP server) only double the size.
	find "$work/db" -name '*.json.gz' -delete
	# The entries in data/osv carry no dates (the Go team's deploy takes
	# them from git history), so indexdb dates the database 0001-01-01; give
	# it the vulndb commit's time instead, which govulncheck -format json
	# reports as db_last_modified.
	stamp=$(sed -n 's/^v[0-9.]*-\([0-9]\{4\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)-[0-9a-f]\{12\}$/\1-\2-\3T\4:\5:\6Z/p' <<<"$VULNDB_VERSION")
	[ -z "$stamp" ] || printf '{"modified":"%s"}' "$stamp" >"$work/db/index/db.json"
	want=$(find "$src/data/osv" -maxdepth 1 -name '*.json' | wc -l)
	got=$(find "$work/db/ID" -maxdepth 1 -name '*.json' | wc -l)
	if [ "$want" -eq 0 ] || [ "$got" -ne "$want" ] || [ ! -s "$work/db/index/vulns.json" ]; then
		echo "vulnerability database incomplete: $got of $want entries" >&2
		exit 1
	fi
	# One database is kept: an older version's goes when a new one lands.
	find "$TOOLS_DIR" -mindepth 1 -maxdepth 1 -name 'vulndb-*' ! -name "vulndb-$VULNDB_VERSION" -exec rm -rf {} +
	# A rename, so that an interrupted run leaves no half database behind;
	# a concurrent run that got there first wins.
	mv -T "$work/db" "$db" 2>/dev/null || [ -f "$db/index/modules.json" ]
	rm -rf "$work"
	trap - EXIT
	echo "$got entries in $db"
fi

entries=$(find "$db/ID" -maxdepth 1 -name '*.json' | wc -l)
echo "govulncheck $GOVULNCHECK_VERSION ($goversion), golang.org/x/vulndb@$VULNDB_VERSION ($entries entries): ${patterns[*]} in $dir"
cd "$dir"
exec "$bin" -db "file://$db" "${patterns[@]}"
