#!/bin/bash
# Prepared in session 22 (not run): the decode-shape splits again after the 128-byte L2
# promotion moved every decode GEMM by 0.3-1.3 us (session 22, call 5). q|k|v and o sit 0.25-0.45
# us over 1.15x their HBM floor at M <= 8: does another split (or none) now win "into"? Judge
# any winner in the decode step (sessions 10/11/13/21: the op sweep alone misleads), e.g.
#   CANDLE_FP8_SPLIT=5120x8192=3 decode ... against the default, interleaved (decode_sweep.sh).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode &&
#   cp docs/perf/next-s23/s23call2.sh bundle/dev/
source scripts/dev/call_prelude.sh
timeout 300 $BIN/bench --sweep --settle-ms 100 --samples 15 --no-check --shapes \
  1,10240,5120 8,10240,5120 16,10240,5120 1,5120,8192 8,5120,8192 16,5120,8192 > $R/sweep-decode.txt 2>&1
echo "sweep rc=$? at $(elapsed)"
grep "SWEEP-BEST" $R/sweep-decode.txt
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=default CANDLE_FP8_SPLIT=5120x8192=3" "1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
pack_out s23call2
