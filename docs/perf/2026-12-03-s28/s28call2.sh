#!/bin/bash
# (Edited after it ran: the check + racecheck + memcheck lines it ran are now correctness_suite in harness_prelude.sh, the same commands.)
# Session 28 call 2: split-K of the 2-warpgroup (128-row) tiles reduced inside a cluster of 2 or
# 4 CTAs by a reduce-scatter (each rank sums and stores a 1/S column slice of the tile), instead
# of rank 0 summing every peer (S = 2) or the workspace + reduce kernel (S = 4). Predicted:
# 128x4096^2 at 128x128 split 4 = 128 CTAs of 8 K blocks, 256 KB each (64x128 split 2 today:
# 384 KB): ~6.3 us vs 8.4 (auto). 1. correctness (check with splits 2/3/4 of every schedule,
# racecheck, memcheck); 2. sweep, two rounds.
source scripts/dev/harness_prelude.sh
correctness_suite 260
W=warp_spec128x128s6
for r in 1 2; do
  timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,${W}k2,${W}k4,warp_spec128x64s8k2,warp_spec128x64s8k4 \
    --shapes 64,4096,4096 96,4096,4096 128,4096,4096 64,5120,8192 128,5120,8192 128,5120,25600 > $O/sweep-a$r.txt 2>&1
  timeout 50 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,${W}k2 \
    --shapes 160,4096,4096 192,4096,4096 256,4096,4096 128,10240,5120 > $O/sweep-b$r.txt 2>&1
  echo "sweep round $r at $(( $(date +%s) - T0 )) s"
done
grep -h -E "WRONG|Error|Traceback" $O/sweep-*.txt | head -5
for r in 1 2; do echo "== round $r"; grep -h "^SWEEP [0-9]" $O/sweep-a$r.txt $O/sweep-b$r.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'; done
