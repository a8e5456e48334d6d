#!/bin/bash
# Prepared in session 25 (not run). Two mid-M cases where today's configs leave SMs idle or run a
# 3.03-wave grid (docs/PERF.md "Session 25", misses table):
#  - q|k|v (10240x5120) at M = 32-128: 80 column tiles of 128 on 80 of 132 SMs (M = 33-64: small-M
#    64x128 split 1; 65-128: warp-specialized 128x128 split 1). Candidates: every compiled config
#    (the sweep's default list: 64x64 / 64x128 / 128x64 splits, swap-AB 64x64, 32-token swap-AB).
#  - gate_up (51200x5120) at M = 33-64: small-M 64x128, 400 CTAs = 3.03 waves; the persistent
#    128x128 tile with a 4-way split tail (what M = 65-128 now runs; half its MMA rows empty).
# Harness route (kernels built on the device), op path, hot / cold, two rounds; ~4 device minutes.
source scripts/dev/harness_prelude.sh
SW="timeout 150 $H --lib /tmp/lib_plain.so sweep --no-full"
for r in 1 2; do
  $SW --shapes 32,10240,5120 64,10240,5120 96,10240,5120 128,10240,5120 > $O/sweep-qkv-r$r.txt 2>&1
  $SW --only auto,persistent128x128s5k4,small_m64x128s6k2 --shapes 48,51200,5120 64,51200,5120 > $O/sweep-gu-r$r.txt 2>&1
  echo "round $r at $(( $(date +%s) - T0 )) s"
done
grep -h -E "WRONG|Error|Traceback" $O/sweep-*.txt | head -5
for f in $O/sweep-*-r*.txt; do grep -h "^SWEEP [0-9]" $f | awk -v f=$(basename $f .txt) '{printf "%-14s %s %s %s %-26s %8s %8s\n", f, $2, $3, $4, $5, $6, $7}'; done | sort -k2,2n -k5,5 -s
