#!/usr/bin/env bash
# Quick start, part 1: build the launcher and gsync-perf (only them: tools/test.sh builds the
# rest), then run gsync-perf on 4 local ranks (float32 sum, 8 B .. 64 MiB, every element checked
# against a double-precision reference: the #wrong column must be 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
gsync_targets=(gsyncrun gsync-perf)
source tools/setup.sh
build=${GSYNC_BUILD_DIR:-build}
exec "$build/tools/gsyncrun" -n 4 -- "$build/tools/gsync-perf" -b 8 -e 64M -f 2 -c 1 "$@"
