#!/bin/bash
# Session 36 call 5: the decode step with the stream-K publish off the math path.
# decode = the change (dispatch unchanged: stream-K for the plain gate/up GEMM at 9-32 tokens,
# which the step runs at 17-32); decode_old = f6fd059 (before); decode_sk = the change + q|k|v on
# stream-K too (9-16 tokens: 16x64 s7 three per SM from one wave of 64-row tiles; 17-32: 32x64 s8
# two per SM). b16 shows the 9-16 rule, b32 the 17-32 one. Then the gpu and qwen3_gpu suites.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new DECODE_BIN=$BIN/decode_sk" "16 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
SUITE_TIMEOUT=200 run_suites gpu qwen3_gpu
pack_out s36call5
