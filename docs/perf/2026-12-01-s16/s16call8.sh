#!/bin/bash
# Session 16, call 8 (final code: paced first fill, W = 1 by default): gpu, gpu_fused,
# qwen3_gpu; decode default vs W = 2 vs unpaced (x2, b1 / b16); the bench's swap-AB rows and
# the M = 1 full linear at the default.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu_fused qwen3_gpu gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "X=1 CANDLE_FP8_PREFILL_WINDOW=2 CANDLE_FP8_PREFILL_WINDOW=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
grep -h "peak\|TTFT" $R/dec/sweep-X_1-b1-r1.log $R/dec/sweep-X_1-b16-r1.log | cut -c1-60
SH="1,4096,4096 16,4096,4096 32,4096,4096"
for m in 1 2 4 8 16 32; do SH="$SH $m,10240,5120 $m,5120,8192 $m,51200,5120 $m,5120,25600"; done
timeout 150 $BIN/bench --shapes $SH --full-linear-max-m 1 --no-check --json $R/bench.json > $R/bench.log 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
python3 - $R/bench.json <<'PY'
import json, sys
rows = {}
for r in json.load(open(sys.argv[1]))["rows"]:
    rows.setdefault((r["m"], r["n"], r["k"]), {})[r["temp"]] = r
f = lambda v: f"{v:7.2f}" if v is not None else "      -"
print("M x N x K         into hot / cold | full hot | cuBLASLt hot / cold")
for key, R in rows.items():
    g = lambda t, k: R.get(t, {}).get(k)
    print(f"{'x'.join(map(str, key)):16} {f(g('hot','ours_into_us'))} / {f(g('cold','ours_into_us'))} | {f(g('hot','full_linear_us'))} | {f(g('hot','cublaslt_us'))} / {f(g('cold','cublaslt_us'))}")
PY
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s16call8.tgz r && rm -rf r && echo packed
