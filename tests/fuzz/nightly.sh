#!/usr/bin/env bash
# The nightly fuzzing run: every libFuzzer target of tests/fuzz/ for a minute (or SECONDS) after its
# committed corpus; the test suite's fuzz_parsers runs the same for a few seconds each.
#
#   tests/fuzz/nightly.sh [SECONDS=60] [BUILD_DIR=build/fuzz-nightly]
#
# A crash leaves its input under BUILD_DIR/crashes/TARGET/: fix it, then add the input to
# tests/fuzz/corpus/TARGET/ so that every later run replays it.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_fuzz.sh" "${1:-60}" "${2:-build/fuzz-nightly}"
