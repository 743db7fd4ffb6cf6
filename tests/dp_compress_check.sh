#!/usr/bin/env bash
# Compression keeps training on track only with error feedback: trains the data-parallel example on
# 4 ranks with f32 gradients, int8+EF, top-k+EF and top-k without EF (same seed, steps, batch), then
# checks that int8+EF and top-k+EF end within 2% of the f32 final loss, that top-k without EF ends
# measurably worse (> 2% above, so this test can fail both ways), and that the wire bytes shrink as
# promised (int8 <= 0.3x, top-k <= 0.2x of f32).
#   dp_compress_check.sh GSYNCRUN DATA_PARALLEL_MLP OUTDIR
set -euo pipefail
run=$1 dp=$2 out=$3
mkdir -p "$out"
common=(--steps 60 --batch 8 --seed 3 --print-every 0)
"$run" -n 4 -- "$dp" "${common[@]}" --json "$out/none.json"
"$run" -n 4 -- "$dp" "${common[@]}" --compress int8 --json "$out/int8.json"
"$run" -n 4 -- "$dp" "${common[@]}" --compress topk --topk-ratio 0.05 --json "$out/topk.json"
"$run" -n 4 -- "$dp" "${common[@]}" --compress topk --topk-ratio 0.05 --no-ef --json "$out/topk_noef.json"
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
r = {k: json.load(open(f"{d}/{k}.json")) for k in ("none", "int8", "topk", "topk_noef")}
base, bb = r["none"]["final_loss"], r["none"]["bytes_on_wire"]
ok = True
for k, v in r.items():
    rel = v["final_loss"] / base - 1
    print(f"{k:10s} final_loss {v['final_loss']:.5f} ({rel:+.2%} vs f32)  bytes_on_wire {v['bytes_on_wire']} ({v['bytes_on_wire']/bb:.3f}x)")
def check(cond, msg):
    global ok
    if not cond:
        print("FAIL:", msg); ok = False
check(abs(r["int8"]["final_loss"] / base - 1) <= 0.02, "int8+EF final loss not within 2% of f32")
check(abs(r["topk"]["final_loss"] / base - 1) <= 0.02, "topk+EF final loss not within 2% of f32")
check(r["topk_noef"]["final_loss"] / base - 1 > 0.02, "topk without EF is not measurably worse than f32")
check(r["int8"]["bytes_on_wire"] <= 0.3 * bb, "int8 does not shrink the wire bytes to <= 0.3x")
check(r["topk"]["bytes_on_wire"] <= 0.2 * bb, "topk(0.05) does not shrink the wire bytes to <= 0.2x")
sys.exit(0 if ok else 1)
PY
