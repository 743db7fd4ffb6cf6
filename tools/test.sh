#!/usr/bin/env bash
# Quick start, part 2: build, then run the whole test suite (doctest through ctest).
#
# Three ctest runs: first every test but the sanitizer and soft-RoCE stages, -j$(nproc); then the
# sanitizer stage alone (it runs two compilers, then two test processes, by itself); then the
# soft-RoCE stage (tools/rxe_guest.sh: a QEMU guest whose two vCPUs take both cores). In one run with -j2, ctest
# cannot start a test that needs both processors while any other runs, so the stage waited for a
# gap that only came at the end, and one core sat idle meanwhile. All runs always happen; the
# script fails when any does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/setup.sh
build=${GSYNC_BUILD_DIR:-build}
rc=0
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 -LE '^(sanitize|rxe)$' || rc=1
ctest --test-dir "$build" --output-on-failure --timeout 900 -L '^sanitize$' || rc=1
ctest --test-dir "$build" --output-on-failure --timeout 960 -L '^rxe$' || rc=1
exit $rc
