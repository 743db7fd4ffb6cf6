#!/usr/bin/env bash
# A header-only file that only calls collectives on a communicator it was given compiles none of
# the set-up code (issue 52): compiles tests/support/given_step.cpp as a user would (g++ -O2) and
# fails when its object defines a symbol of the set-up (store, connector, heartbeat, constructor,
# the data path's rare calls), or none of the data path (then the check would prove nothing).
# Usage: given_no_setup.sh CXX SOURCE_DIR [flags...]
set -euo pipefail
cxx=$1
src=$2
shift 2
obj=$(mktemp --suffix=.o)
trap 'rm -f "$obj"' EXIT
"$cxx" -std=c++20 -O2 -DASIO_STANDALONE -DASIO_NO_DEPRECATED "$@" -I"$src/include" -c "$src/tests/support/given_step.cpp" -o "$obj"
syms=$(nm -C --defined-only "$obj")
setup='bootstrap::store_client::|bootstrap::store_server|start_connector|heartbeat::|admission::|host_mesh::host_mesh|host_mesh::do_|connect_retry|resolve_host|link_probe'
if bad=$(grep -E "$setup" <<< "$syms"); then
  echo "given_no_setup: the file that only calls collectives compiles set-up code:" >&2
  cut -c1-200 <<< "$bad" | sed -n 1,20p >&2
  exit 1
fi
grep -q 'host_mesh::post_send' <<< "$syms" || { echo "given_no_setup: no data path in the object (host_mesh::post_send): the check proves nothing" >&2; exit 1; }
echo "given_no_setup: ok ($(wc -l <<< "$syms") symbols, none of the set-up)"
