#!/bin/bash
# Session 34, call 2: first run of the stream-K swap-AB tiles (kind 5 "swap_ab_sk", split_k =
# CTAs per SM; bundle/dev/lib_sk.so = the working tree's kernels). Harness sweep (op path,
# hot / cold us; every config checked against the f32 reference on a NaN-poisoned output first)
# on the decode shapes against the dispatched config. Prediction: q|k|v 1-8 cold ~14.3-14.6
# (auto 14.8-15.0: split 2 cluster), o 1-8 ~12.0-12.5 (auto: split 4 + reduce launch), down
# 1-16 ~33.5-34 (auto 34.3), gate_up 1-16 within ±1 % of auto; a trap (flags never raised) or
# WRONG line = a bug.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
H="python3 scripts/dev/harness.py --lib $BIN/lib_sk.so"
sw() {  # shape, configs
  timeout 120 $H sweep --no-full --shapes $1 --only $2 > $R/sweep-$1.txt 2>&1
  echo "sweep $1 rc=$? at $(elapsed)"; grep -E "SWEEP [0-9]|WRONG|Error|error" $R/sweep-$1.txt | head -12
}
S8=auto,swap_ab_sk8x64s8k1,swap_ab_sk8x64s8k2,swap_ab_sk8x64s8k3
S16=auto,swap_ab_sk16x64s8k1,swap_ab_sk16x64s8k2,swap_ab_sk16x64s7k3
for s in 1,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600 8,10240,5120 8,5120,8192 5,5120,25600; do sw $s $S8; done
for s in 16,10240,5120 16,5120,8192 16,51200,5120 16,5120,25600 13,10240,5120; do sw $s $S16; done
sw 20,5120,8192 auto,swap_ab_sk16x64s8k2,swap_ab_sk32x64s8k1,swap_ab_sk32x64s8k2
for s in 32,10240,5120 32,5120,25600 40,5120,8192; do sw $s auto,swap_ab_sk32x64s8k1,swap_ab_sk32x64s8k2; done
pack_out s34sk; mkdir -p $R  # pack_out removed it
# The stream-K tiles through the Rust path: forced_splits_match_reference (ragged M, 1-16 shares
# per tile, SM budgets 4 / 5, bitwise repeat) with the rest of that test's configs.
timeout 200 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced.txt | head -5
pack_out s34sk
