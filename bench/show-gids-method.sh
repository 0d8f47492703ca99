#!/usr/bin/env bash
# The baseline of bench/list.sh: the GID listing done the way Mellanox's
# show_gids does it, written here from its documented method (the script
# is not packaged by Debian, and it is not ours to ship). What makes that
# method cost what it costs is kept exactly: a shell loop over
# class/infiniband/DEV/ports/PORT/gids/*, listed with ls, one `cat` process
# per GID slot, and for each used slot two more `cat`s (gid_attrs/ndevs,
# gid_attrs/types), a grep of the type's version, a cut of the first group
# and a printf of the IPv4 address, each in its own command substitution.
#
#   bench/show-gids-method.sh [SYSFS_ROOT]      (default /sys)
#
# Prints DEV PORT INDEX GID IPv4 VER NETDEV, one row per used slot (the
# all-zero and fe80::/64-with-zero-interface-id slots skipped).
set -u
class=${1:-/sys}/class/infiniband
zero=0000:0000:0000:0000:0000:0000:0000:0000
linklocal_zero=fe80:0000:0000:0000:0000:0000:0000:0000

printf 'DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4\t\tVER\tDEV\n'
for dev in $(ls "$class"); do
	for port in $(ls "$class/$dev/ports"); do
		pdir=$class/$dev/ports/$port
		for slot in $(ls "$pdir/gids"); do
			gid=$(cat "$pdir/gids/$slot")
			case $gid in "$zero" | "$linklocal_zero") continue ;; esac
			netdev=$(cat "$pdir/gid_attrs/ndevs/$slot" 2>/dev/null)
			type=$(cat "$pdir/gid_attrs/types/$slot" 2>/dev/null)
			version=$(echo "$type" | grep -o '[Vv].*')
			ipv4=""
			if [ "$(echo "$gid" | cut -d: -f1)" = 0000 ]; then
				ipv4=$(printf '%d.%d.%d.%d' "0x${gid:30:2}" "0x${gid:32:2}" "0x${gid:35:2}" "0x${gid:37:2}")
			fi
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$dev" "$port" "$slot" "$gid" "$ipv4" "$version" "$netdev"
		done
	done
done
