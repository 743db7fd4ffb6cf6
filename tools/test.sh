#!/usr/bin/env bash
# Quick start, part 2: build, then run the whole test suite (doctest through ctest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/setup.sh
build=${GSYNC_BUILD_DIR:-build}
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900
