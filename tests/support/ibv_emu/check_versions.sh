#!/bin/sh
# Every function the stand-in exports from rdma-core's API must carry the version node the system's
# libibverbs.so.1 gives it (its default version), so that one binary runs against either library.
# Usage: check_versions.sh STAND_IN_LIBIBVERBS_SO_1. Exit 77 (a skip) without objdump or the real one.
set -eu
emu=$1
real=$(ldconfig -p 2>/dev/null | awk '/libibverbs\.so\.1 / {print $NF; exit}')
if ! command -v objdump >/dev/null || [ -z "$real" ] || [ ! -e "$real" ]; then
  echo "SKIP: needs objdump and the system's libibverbs.so.1 (Debian: binutils, libibverbs1)"
  exit 77
fi
# "VERSION NAME" of the default (not parenthesized) versions of ibv_* and _ibv_* functions.
versions() { objdump -T "$1" | awk '$NF ~ /^_?ibv_/ && $(NF-1) !~ /^\(/ {print $NF, $(NF-1)}' | sort; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
versions "$emu" >"$tmp/emu"
versions "$real" >"$tmp/real"
bad=$(join "$tmp/emu" "$tmp/real" | awk '$2 != $3 {print "  " $1 ": stand-in " $2 ", " real " " $3}' real="$real")
missing=$(join -v1 "$tmp/emu" "$tmp/real" | awk '{print "  " $1 " (not in the real library)"}')
if [ -n "$bad$missing" ]; then
  printf 'stand-in %s differs from %s:\n%s\n%s\n' "$emu" "$real" "$bad" "$missing"
  exit 1
fi
echo "$(wc -l <"$tmp/emu") functions at the real library's version nodes ($real)"
