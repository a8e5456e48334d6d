#!/bin/bash
# Session 34, call 1 (carry bundle/dev: bench + decode built with next-s34's
# swap-trigger-exit.patch, lib_head.so = HEAD's kernels without it).
# 1-2. docs/perf/next-s34/trigger-and-sweeps.sh as prepared (its header holds the predictions).
# 3. The down rule's unmeasured split-2 region (session 33 note): 89-131 column tiles of 64 rows
#    with >= 128 K blocks at 25-32 tokens get swap-AB 32x64 split 2 (2*S/tiles). Shapes N = 7168
#    (112 tiles) and 6144 (96), K = 16384, against split 3/4 and the 64x128 tile that 24 tokens
#    would get. Prediction: split 2 (224 / 192 CTAs, 64 K blocks each) within ±3 % of split 3;
#    if split 3 wins by more, narrow the rule to split 3.
bash docs/perf/2026-12-03-s34/trigger-and-sweeps.sh
source scripts/dev/call_prelude.sh >> $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
R=$OUT/r3; mkdir -p $R
H="python3 scripts/dev/harness.py --lib $BIN/lib_head.so"
timeout 150 $H sweep --no-full --shapes 32,7168,16384 28,6144,16384 \
  --only auto,swap_ab32x64s8k2,swap_ab32x64s8k3,swap_ab32x64s8k4,small_m64x128s6k3,small_m64x128s8k2 \
  > $R/split2.txt 2>&1
echo "split2 rc=$? at $(elapsed)"; grep -E "SWEEP|BEST|WRONG" $R/split2.txt
pack_out s34split2
