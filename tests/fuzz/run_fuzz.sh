#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer)
# and runs each: first over its committed corpus (tests/fuzz/corpus/TARGET/: seeds and every crash
# found so far, kept as regression inputs), then for SECONDS of fresh fuzzing.
#
#   tests/fuzz/run_fuzz.sh [SECONDS=20] [BUILD_DIR=build/fuzz]
#
# Exit 0: no crash; 1: a target crashed or failed to build (the crashing input is saved under
# BUILD_DIR/crashes/TARGET/: add it to the corpus once fixed); 77: no clang++ with libFuzzer here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
secs=${1:-20}
out=${2:-build/fuzz}
cxx=${GSYNC_FUZZ_CXX:-clang++}
if ! command -v "$cxx" >/dev/null; then echo "run_fuzz: $cxx not found (Debian: clang)"; exit 77; fi
mkdir -p "$out"
probe="$out/probe.cpp"
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe"
if ! "$cxx" -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
  echo "run_fuzz: $cxx cannot link libFuzzer (Debian: libclang-rt-14-dev)"; exit 77
fi
inc=()  # Asio from /usr/include needs no flag (and -isystem /usr/include would break libstdc++'s include_next)
[ -f /usr/include/asio.hpp ] || inc=(-isystem "$(dirname "$(find /usr/local/include -maxdepth 1 -name asio.hpp | head -1)")")
crypto=()
if [ -f /usr/include/openssl/hmac.h ]; then crypto=(-DGSYNC_HAVE_OPENSSL=1 -lcrypto); fi
status=0
for src in tests/fuzz/fuzz_*.cpp; do
  t=$(basename "$src" .cpp)
  echo "== $t: build"
  if ! "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -DASIO_STANDALONE -DASIO_NO_DEPRECATED -Iinclude "${inc[@]}" "$src" -o "$out/$t" "${crypto[@]}" -lpthread; then
    echo "run_fuzz: $t failed to build"; status=1; continue
  fi
  corpus=tests/fuzz/corpus/$t
  work="$out/work/$t"
  crashes="$out/crashes/$t"
  rm -rf "$work"; mkdir -p "$work" "$crashes"
  echo "== $t: regression inputs ($(ls "$corpus" 2>/dev/null | wc -l))"
  if [ -d "$corpus" ] && ! "$out/$t" -runs=0 "$corpus" >"$out/$t.regress.log" 2>&1; then
    echo "run_fuzz: $t crashes on a committed input"; tail -30 "$out/$t.regress.log"; status=1; continue
  fi
  echo "== $t: fuzzing for ${secs}s"
  if ! "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
      -print_final_stats=1 "$work" ${corpus:+$( [ -d "$corpus" ] && echo "$corpus")} >"$out/$t.log" 2>&1; then
    echo "run_fuzz: $t crashed; input saved under $crashes/"; tail -40 "$out/$t.log"; status=1; continue
  fi
  grep -E "stat::number_of_executed_units|cov:" "$out/$t.log" | tail -2
done
exit $status
