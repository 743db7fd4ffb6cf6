#!/usr/bin/env bash
# Installs what gsync's build and tests need (Debian 12 packages; as root, only the missing ones)
# and builds in ./build (or $GSYNC_BUILD_DIR) the targets the sourcing script names in the array
# gsync_targets (demo.sh: only what it runs, so a newcomer sees its table in minutes), else
# everything (test.sh). Sourced by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pkgs=(g++ make cmake libasio-dev doctest-dev openmpi-bin libopenmpi-dev libssl-dev clang libclang-rt-14-dev python3 iproute2 pkg-config doxygen libibverbs-dev
      python3-torch libtorch-dev pybind11-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "gsync: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "gsync: missing Debian packages: ${missing[*]}" >&2
    echo "       run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
build=${GSYNC_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ -n "${gsync_targets+x}" ]; then
  cmake --build "$build" -j "$(nproc)" --target "${gsync_targets[@]}"
else
  cmake --build "$build" -j "$(nproc)"
fi
