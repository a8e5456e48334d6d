#!/bin/bash
# Session 23, call 5 (bundle route): cargo build with the persistent 128x128 s5 tile multicasting
# its activation tile over 2-CTA clusters (s105 = the same without multicast, a dev key) and
# bench.rs timing the peers' operands (randn quantized per group, gaussian_fp8).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu gpu_reliability &&
#   cp /work/bench_codes.xz bundle/dev/ (call 1's bench: uniform e4m3 codes, 128x128 without multicast)
# 0. gemm_checks: gpu, dev_variants (s5 vs s105 bitwise + CPU reference, m 300 / 513, n 272: an
#    odd column-tile count), forced_splits, sanitizer_boundary_shapes, racecheck of dev_variants.
# 1. bench ours / into / cuBLASLt, multicast (dispatched) vs --dev-variant, two rounds, on shapes
#    the dispatcher gives the 128x128 tile. Prediction: 2-5 % faster (harness, call 3).
# 2. Data: the same bench on the 256x128 shapes with call 1's binary (uniform codes) vs this one
#    (peers' data), ours and our cuBLASLt provider. Prediction: both ~3 % faster on randn data.
source scripts/dev/call_prelude.sh
RACE_TIMEOUT=150 gemm_checks
SH="512,4096,4096 300,5120,8192 2048,5120,8192 400,4096,5120"
bench_ab 2 mc= nomc=--dev-variant -- --shapes $SH --columns ours,into,lt --samples 15
python3 scripts/dev/ab_table.py $R mc nomc --columns ours/into/lt | tee $R/ab-mc.txt
grep -h "^config" $R/bench-nomc-r1.txt | sort | uniq -c
mkdir -p $R/data
for r in 1 2; do
  for v in codes gauss; do
    b=$BIN/bench; [[ $v == codes ]] && b=$BIN/bench_codes
    timeout 120 $b --shapes 4096,4096,4096 2048,4096,4096 2048,10240,5120 --columns ours,into,lt --samples 15 > $R/data/bench-$v-r$r.txt 2>&1
    echo "data $v round $r rc=$? at $(elapsed)"
  done
done
python3 scripts/dev/ab_table.py $R/data gauss codes --columns ours/into/lt | tee $R/ab-data.txt
pack_out s23call5
