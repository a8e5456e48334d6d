#!/bin/bash
# Session 22, call 5: the cargo build of 3d8a3ce + the swap-AB weight maps' L2 promotion at
# 128 B (uncommitted then). Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu gpu_reliability &&
#   cp docs/perf/2026-12-02-s22/s22call5.sh bundle/dev/
# 0. gpu, dev_variants (overlapped vs previous loops, bitwise, CPU reference), forced_splits,
#    sanitizer_boundary_shapes; racecheck on dev_variants.
# 1. bench ours / into / cuBLASLt, overlapped (dispatched) vs --dev-variant, two rounds.
# 2. decode-shape GEMMs (ours / into), L2 promotion 128 (default now) vs 256, two rounds.
source scripts/dev/call_prelude.sh
gemm_checks
SH="128,10240,5120 128,51200,5120 128,5120,8192 128,5120,25600 512,4096,4096 2048,5120,8192 300,5120,8192"
bench_ab 2 xp= old=--dev-variant -- --shapes $SH --columns ours,into,lt --samples 15
python3 scripts/dev/ab_table.py $R xp old --columns ours/into/lt | tee $R/ab-table.txt
grep -h "^config" $R/bench-old-r1.txt | sort | uniq -c
DS="1,10240,5120 8,10240,5120 16,10240,5120 1,5120,8192 16,5120,8192 1,51200,5120 1,5120,25600 16,5120,25600"
for r in 1 2; do
  for p in 128 256; do
    CANDLE_FP8_WEIGHT_L2_PROMOTION=$p timeout 140 $BIN/bench --shapes $DS --columns ours,into --samples 15 > $R/bench-p$p-r$r.txt 2>&1
    echo "promo $p round $r rc=$? at $(elapsed)"
  done
done
python3 scripts/dev/ab_table.py $R p128 p256 --columns ours/into | tee $R/ab-promo.txt
echo "done at $(elapsed)"
pack_out s22call5
