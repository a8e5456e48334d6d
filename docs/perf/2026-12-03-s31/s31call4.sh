#!/bin/bash
# Session 31 call 4 (bundle route, bundle/dev carried): the final small-M 64x128 rule — 8 stages
# (overlapped loop) at split 1-2; 6 stages at split >= 3 with the N-halves loop for K ranges of
# <= 32 blocks (o at 33-64 tokens), the overlapped loop otherwise (down) — built from this tree
# (new) against 09dba4f (old). The GEMM suites first (gpu_reliability's dev_variants now with a
# split-3 K range of 34 blocks), the gpu suite (quick grid), then one decode round at 48
# sequences if time is left (the session's device time allows ~2 minutes of command).
source scripts/dev/call_prelude.sh
timeout 120 "$BIN/gpu_reliability" dev_variants forced_splits sanitizer_boundary_shapes --test-threads=1 > "$R/test-rel.txt" 2>&1
echo "dev_variants + forced_splits + sanitizer_boundary_shapes rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
SUITE_TIMEOUT=100 run_suites gpu:CANDLE_FP8_GPU_QUICK=1
if (( $(date +%s) - T0 < 70 )); then
  OUT=$R/dec REPEAT=1 DECODE_TOKENS=32 WARMUP=0 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "48" > $R/decode.txt 2>&1
  echo "decode rc=$? at $(elapsed)"
  sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
fi
pack_out s31call4
