#!/bin/bash
# (Prepared in session 23 as next-s24/s24call1.sh; session 24 ran its measurements inside s24call2.sh.)
# Prepared in session 23 (not run): where the energy of a large-M GEMM goes. Session 23 found
# every large-M GEMM (ours and cuBLASLt's) at the board's ~690 W cap, so its time is the energy
# per GEMM over the cap (4096^3: ours 91.3 mJ, cuBLASLt 90.8; zero operands: 49.7 mJ, uncapped).
# The energy probe (energy-probe.patch: -DFP8GEMM_ENERGY_PROBE, bit 1 = no promotion FFMAs, bit
# 2 = no wgmma; results wrong, development builds only; PTX of the default build unchanged)
# splits it into copies + barriers + epilogue (3), + MMA (1), + promotion (2), full (0).
# Prediction: MMA (with random data) ~40-50 mJ, promotion ~5-10, the rest ~35 (static power over
# the run, TMA, L2). If the promotion is >= 10 %, cheaper promotion (fewer instructions per
# element) is the lever; if the MMA dominates, only fewer or cheaper MMA bits are.
# Run from the repo root after `git apply docs/perf/2026-12-02-s24/energy-probe.patch`:
#   bash docs/perf/2026-12-02-s24/s24call1.sh
source scripts/dev/harness_prelude.sh
wait $BPID  # the stage-probe build shares build/
for v in 1 2 3; do
  EXTRA_FLAGS=-DFP8GEMM_ENERGY_PROBE=$v bash scripts/dev/build.sh > $O/build-e$v.txt 2>&1 && cp libfp8gemm.so /tmp/lib_e$v.so
done
echo "probe builds $(( $(date +%s) - T0 )) s"
C=persistent256x128s3,persistent128x128s5
$H --lib /tmp/lib_plain.so power --only $C,torch_lt --shapes 4096,4096,4096 > $O/power-e0.txt 2>&1
for v in 1 2 3; do
  $H --lib /tmp/lib_e$v.so power --only $C --shapes 4096,4096,4096 > $O/power-e$v.txt 2>&1
done
$H --lib /tmp/lib_plain.so power --data zeros --only $C --shapes 4096,4096,4096 > $O/power-zeros.txt 2>&1
# down at 2048 tokens, the one large-M row where cuBLASLt leads (478-486 vs 543 us, session 23):
# the same energy per GEMM (then it is scheduling: 320 tiles of 256x128 are 2.42 rounds, the last
# one 42 % full and below the cap; stream-K over the last round would recover ~60 us) or less?
$H --lib /tmp/lib_plain.so power --only $C,torch_lt --shapes 2048,5120,25600 > $O/power-down.txt 2>&1
echo "done $(( $(date +%s) - T0 )) s"
grep -h -E "Error|error|Traceback" $O/power-*.txt | head -5
for f in $O/power-e0.txt $O/power-e1.txt $O/power-e2.txt $O/power-e3.txt $O/power-zeros.txt $O/power-down.txt; do
  grep "^POWER [0-9]" $f | sed "s#^#$(basename $f .txt) #"
done
