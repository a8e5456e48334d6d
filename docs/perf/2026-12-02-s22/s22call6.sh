#!/bin/bash
# Session 22, call 6: the whole GEMM table on the final code (the overlapped 128x128 loops,
# 3d8a3ce, and the swap-AB weight maps at 128-byte L2 promotion): anchors.py (torch cuBLASLt,
# Triton) then bench, back to back on one machine; then decode with the promotion at 128
# (default) vs 256 (CANDLE_FP8_WEIGHT_L2_PROMOTION=256): b1 two pairs, b16 one.
# Pack here: rm -f bundle/dev/* && CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode &&
#   cp ../shared/peers/anchors.py docs/perf/2026-12-02-s22/s22call6.sh bundle/dev/
source scripts/dev/call_prelude.sh
timeout 330 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
BENCH_STAMPS=1 timeout 240 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2>&1
echo "bench rc=$? at $(elapsed)"
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=p128 CANDLE_FP8_WEIGHT_L2_PROMOTION=256" "1" > $R/decode.txt 2>&1
OUT=$R/dec WARMUP=0 bash scripts/dev/decode_sweep.sh "X=p128 CANDLE_FP8_WEIGHT_L2_PROMOTION=256" "16" >> $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
echo "decode at $(elapsed)"
pack_out s22call6
