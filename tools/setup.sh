#!/usr/bin/env bash
# Installs what gsync's build and tests need (Debian 12 packages; as root, only the missing ones)
# and builds in ./build (or $GSYNC_BUILD_DIR) the targets the sourcing script names in the array
# gsync_targets (demo.sh: only what it runs, so a newcomer sees its table in minutes), else
# everything (test.sh). Sourced by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pkgs=(g++ make cmake libasio-dev doctest-dev openmpi-bin libopenmpi-dev libssl-dev clang libclang-rt-14-dev python3 iproute2 pkg-config doxygen libibverbs-dev
      python3-torch libtorch-dev pybind11-dev)
# The soft-RoCE stage (tools/rxe_guest.sh, ctest label rxe) boots a guest kernel under QEMU: only
# for the whole suite, and optional: without them (or without root) that stage skips.
rxe_pkgs=()
[ -n "${gsync_targets+x}" ] || rxe_pkgs=(qemu-system-x86 linux-image-amd64 busybox-static ibverbs-providers)
missing=() missing_rxe=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
for p in "${rxe_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_rxe+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ ${#missing_rxe[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "gsync: installing ${missing[*]} ${missing_rxe[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    [ ${#missing[@]} = 0 ] || apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # INITRD=No: the guest boots without Debian's initramfs, which takes most of the install's time.
    [ ${#missing_rxe[@]} = 0 ] || INITRD=No apt-get install -y -qq --no-install-recommends "${missing_rxe[@]}" >/dev/null ||
      echo "gsync: could not install ${missing_rxe[*]}: the soft-RoCE tests will skip" >&2
  elif [ ${#missing[@]} -gt 0 ]; then
    echo "gsync: missing Debian packages: ${missing[*]}" >&2
    echo "       run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  else
    echo "gsync: without ${missing_rxe[*]} (and root) the soft-RoCE tests skip" >&2
  fi
fi
build=${GSYNC_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ -n "${gsync_targets+x}" ]; then
  cmake --build "$build" -j "$(nproc)" --target "${gsync_targets[@]}"
else
  cmake --build "$build" -j "$(nproc)"
fi
