#!/bin/bash
# Session 21, call 6: the final build — small-M 64 x 128 and persistent 128 x 128 with two TMA
# issuer threads as the dispatched tiles, their single-issuer versions as development keys.
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu gpu_reliability &&
#   cp docs/perf/2026-12-02-s21/s21call6.sh bundle/dev/
# 0. gpu (reference grid on the dispatched configs), dev_variants (two issuers vs one, bitwise,
#    CPU reference), forced_splits, sanitizer_boundary_shapes; racecheck on dev_variants.
# 1. bench ours / into / cuBLASLt on the rows these tiles serve, dispatched (two issuers) vs
#    --dev-variant (one), two interleaved rounds.
source scripts/dev/call_prelude.sh
RACE_TIMEOUT=180 gemm_checks
SH="160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 512,4096,4096 64,10240,5120 64,51200,5120
2048,5120,8192"
bench_ab 2 two= one=--dev-variant -- --shapes $SH --columns ours,into,lt --samples 15
python3 scripts/dev/ab_table.py $R two one --columns ours/into/lt | tee $R/ab-table.txt
grep -h "^config" $R/bench-one-r1.txt | sort | uniq -c
echo "done at $(elapsed)"
pack_out s21call6
