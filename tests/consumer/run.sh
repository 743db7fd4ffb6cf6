#!/usr/bin/env bash
# Builds and runs the consumer project (tests/consumer/app) the way a user would take gsync:
#   run.sh MODE SOURCE_DIR BUILD_DIR GSYNCRUN
# MODE: find_package (installs BUILD_DIR to a fresh prefix first, and checks that no path of this
# machine's build or source tree leaked into the installed package), subdirectory, fetchcontent,
# pkgconfig (a plain compiler command with `pkg-config --cflags --libs gsync`).
# Each program is run as 2 ranks under gsyncrun and must compute the right sums. Exit 77: a tool
# the mode needs (pkg-config) is missing (reported as a skip).
set -euo pipefail
mode=$1 src=$(cd "$2" && pwd) build=$(cd "$3" && pwd) gsyncrun=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx=${CXX:-c++}
install_prefix() {
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
  # The installed package must not point into this machine's source or build tree.
  if grep -rl -e "$src" -e "$build" "$tmp/prefix/lib/cmake" "$tmp/prefix/share/pkgconfig"; then
    echo "FAIL: the installed package names the source or build tree (above)"; exit 1
  fi
}
run2() {
  "$gsyncrun" -n 2 --timeout-s 120 -- "$@"
}
case $mode in
  find_package)
    install_prefix
    [ -x "$tmp/prefix/bin/gsyncrun" ] || { echo "FAIL: gsyncrun not installed to bin"; exit 1; }
    # An unknown component fails find_package, saying so.
    if out=$(cmake -S "$src/tests/consumer/app" -B "$tmp/bad" -DGSYNC_CONSUME=find_package -DGSYNC_ASK_COMPONENT=bogus \
               -DCMAKE_PREFIX_PATH="$tmp/prefix" 2>&1); then
      echo "FAIL: find_package(gsync COMPONENTS bogus) succeeded"; exit 1
    fi
    grep -q "unknown component" <<<"$out" || { echo "$out"; echo "FAIL: no 'unknown component' message"; exit 1; }
    expect_mpi=OFF
    command -v mpicc >/dev/null && expect_mpi=ON
    cmake -S "$src/tests/consumer/app" -B "$tmp/app" -DGSYNC_CONSUME=find_package -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DGSYNC_EXPECT_MPI=$expect_mpi -DCMAKE_BUILD_TYPE=None >/dev/null
    cmake --build "$tmp/app" -j 2 >/dev/null
    "$tmp/prefix/bin/gsyncrun" -n 2 --timeout-s 120 -- "$tmp/app/app"
    "$tmp/prefix/bin/gsyncrun" -n 2 --timeout-s 120 -- "$tmp/app/app_compiled"
    ;;
  subdirectory|fetchcontent)
    cmake -S "$src/tests/consumer/app" -B "$tmp/app" -DGSYNC_CONSUME=$mode -DGSYNC_SOURCE_DIR="$src" -DGSYNC_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=None >/dev/null
    cmake --build "$tmp/app" -j 2 >/dev/null
    # As a subproject gsync builds none of its own tests, tools or examples.
    if [ -e "$tmp/app/gsync/tools/gsyncrun" ] || [ -e "$tmp/app/_deps/gsync-build/tools/gsyncrun" ]; then
      echo "FAIL: gsync built its tools inside the consumer's build"; exit 1
    fi
    run2 "$tmp/app/app"
    ;;
  pkgconfig)
    command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is not installed"; exit 77; }
    install_prefix
    export PKG_CONFIG_PATH="$tmp/prefix/share/pkgconfig"
    [ "$(pkg-config --modversion gsync)" = "$(sed -n 's/.*GSYNC_VERSION_STRING "\([0-9.]*\)".*/\1/p' "$src/include/gsync/version.hpp")" ] || {
      echo "FAIL: pkg-config's version of gsync differs from gsync/version.hpp"; exit 1; }
    # shellcheck disable=SC2046
    "$cxx" -std=c++20 -O0 "$src/tests/consumer/app/main.cpp" -o "$tmp/app_pc" $(pkg-config --cflags --libs gsync)
    run2 "$tmp/app_pc"
    ;;
  *) echo "usage: run.sh find_package|subdirectory|fetchcontent|pkgconfig SOURCE_DIR BUILD_DIR GSYNCRUN"; exit 2 ;;
esac
echo "consumer $mode: OK"
