#!/bin/bash
# Session 16, call 5 (final code: paced first fill W = 2 by default): gpu, gpu_fused, qwen3_gpu;
# decode default vs CANDLE_FP8_PREFILL_WINDOW=0 x2 at b1 / b8 / b16; the bench's swap-AB rows
# (M <= 32) with and without the pacing, the M = 1 full linear.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu gpu_fused qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "X=1 CANDLE_FP8_PREFILL_WINDOW=0" "1 8 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
grep -h "peak\|TTFT" $R/dec/sweep-X_1-b1-r1.log $R/dec/sweep-X_1-b16-r1.log | cut -c1-60
SH="1,4096,4096 16,4096,4096 32,4096,4096"
for m in 1 2 4 8 16 32; do SH="$SH $m,10240,5120 $m,5120,8192 $m,51200,5120 $m,5120,25600"; done
for w in 2 0; do
  CANDLE_FP8_PREFILL_WINDOW=$w timeout 200 $BIN/bench --shapes $SH --full-linear-max-m 1 --no-check --json $R/bench-w$w.json > $R/bench-w$w.log 2>&1
  echo "bench W=$w rc=$? at $(( $(date +%s) - T0 )) s"
done
python3 - $R/bench-w2.json $R/bench-w0.json <<'PY'
import json, sys
def rows(p):
    out = {}
    for r in json.load(open(p))["rows"]:
        out.setdefault((r["m"], r["n"], r["k"]), {})[r["temp"]] = r
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
f = lambda v: f"{v:7.2f}" if v is not None else "      -"
print("M x N x K          into hot/cold W=2   W=0   | full hot W=2  W=0 | cuBLASLt hot/cold")
for key in a:
    A, B = a[key], b.get(key, {})
    g = lambda R, t, k: R.get(t, {}).get(k)
    print(f"{'x'.join(map(str, key)):16} {f(g(A,'hot','ours_into_us'))}/{f(g(A,'cold','ours_into_us'))}  {f(g(B,'hot','ours_into_us'))}/{f(g(B,'cold','ours_into_us'))} | {f(g(A,'hot','full_linear_us'))} {f(g(B,'hot','full_linear_us'))} | {f(g(A,'hot','cublaslt_us'))}/{f(g(A,'cold','cublaslt_us'))}")
PY
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s16call5.tgz r && rm -rf r && echo packed
