#!/bin/bash
# Session 37 call 3: decode b24 / b32 with the plain gate/up GEMM at 17-32 tokens on the
# 32-token stream-K tile three per SM (32x64x5, decode_gu3) instead of two per SM (32x64x8,
# decode = HEAD, the dispatch of session 36). Call 2's op A/B, 32x51200x5120 "into":
# 69.8-70.2 vs 71.3-72.0 hot, 70.3-70.7 vs 72.7-73.0 cold. Prediction: b32 TPOT -0.05 to -0.1 ms.
# Then gpu_fused and qwen3_gpu on HEAD (the parallel storer's first run of these suites).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=base DECODE_BIN=$BIN/decode_gu3" "24 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
SUITE_TIMEOUT=200 run_suites gpu_fused qwen3_gpu
pack_out s37call3
