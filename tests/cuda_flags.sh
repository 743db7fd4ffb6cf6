#!/usr/bin/env bash
# Results that do not depend on the user's nvcc flags (issue 51, item 7): compiles
# tests/cuda/flag_kernels.cu (every gsync kernel) to PTX plainly, with --use_fast_math, and with
# -ftz=true -prec-div=false -prec-sqrt=false --fmad=false, and requires the three to be the same
# text. Equal PTX runs as the same instructions, so the kernels give the same bits under those
# flags (core/exact_fp.hpp says how). Exit 77 (skip) without nvcc.
# Usage: cuda_flags.sh NVCC INCLUDE_DIR SOURCE [ARCH]
set -euo pipefail
nvcc=$1 inc=$2 src=$3 arch=${4:-sm_90}
if [ ! -x "$nvcc" ] && ! command -v "$nvcc" >/dev/null 2>&1; then echo "skipped: no nvcc"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base=(-std=c++20 -arch="$arch" -ptx -I"$inc" -DASIO_STANDALONE -DASIO_NO_DEPRECATED)
"$nvcc" "${base[@]}" "$src" -o "$dir/plain.ptx"
"$nvcc" "${base[@]}" --use_fast_math "$src" -o "$dir/fast.ptx"
"$nvcc" "${base[@]}" -ftz=true -prec-div=false -prec-sqrt=false --fmad=false "$src" -o "$dir/ftz.ptx"
# The file must hold the kernels it claims to: each family at least once.
for k in reduce_kernel ipc_reduce_kernel ipc_copy_kernel cast_kernel unpack_kernel squares_partial squares_final scale_kernel \
         int8_encode_kernel int8_decode_kernel; do
  grep -q "\.entry .*$k" "$dir/plain.ptx" || { echo "FAIL: no $k in the PTX of $src"; exit 1; }
done
echo "$(grep -c '\.entry' "$dir/plain.ptx") kernels"
status=0
for v in fast ftz; do
  if ! cmp -s "$dir/plain.ptx" "$dir/$v.ptx"; then
    echo "FAIL: the PTX differs under the $v flags; the differing instructions (counts):"
    diff "$dir/plain.ptx" "$dir/$v.ptx" | grep '^[<>]' | sed 's/%[a-z]*[0-9]*//g' | sort | uniq -c | sort -rn | head -20
    status=1
  fi
done
[ $status = 0 ] && echo "the same PTX with and without --use_fast_math, -ftz=true, -prec-div=false, --fmad=false"
exit $status
