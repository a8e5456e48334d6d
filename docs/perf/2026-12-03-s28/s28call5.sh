#!/bin/bash
# (Ran with k-interleave.patch applied: the development keys below are not in the tree.)
# Session 28 call 5: two math warpgroups taking alternate K blocks of the small-M tiles at every
# split (development keys stages + 200 / 300: 64x32 s208, 64x64 s208, 64x128 s206 with N halves,
# 64x128 s306 without). The per-stage probe (sessions 21, 26) put mid M at each SM's per-K-block
# chain (wait, wgmma, promote, release ~200-500 ns) with the data already there: two chains per SM
# should take K blocks at up to twice the rate while the L2 keeps up. Predicted: 64x4096^2 6.06 ->
# ~5.2 us, 128x4096^2 8.25 -> ~7. 1. check (every config incl. the new keys), racecheck, memcheck; 2. sweep; 3. stages.
source scripts/dev/harness_prelude.sh
correctness_suite 120
timeout 230 $H --lib /tmp/lib_plain.so sweep --no-full \
  --only auto,small_m64x64s8k2,small_m64x64s208k2,small_m64x64s208,small_m64x32s8k2,small_m64x32s208k2,small_m64x128s6k2,small_m64x128s206k2,small_m64x128s306k2 \
  --shapes 32,4096,4096 48,4096,4096 64,4096,4096 96,4096,4096 128,4096,4096 64,5120,8192 64,10240,5120 64,5120,25600 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
wait $BPID
timeout 60 $H --lib /tmp/lib_stages.so stages --only small_m64x64s8k2,small_m64x64s208k2 --shapes 64,4096,4096 > $O/stages.txt 2>&1
timeout 60 $H --lib /tmp/lib_stages.so stages --only small_m64x128s6k2,small_m64x128s206k2 --shapes 128,4096,4096 >> $O/stages.txt 2>&1
echo "stages rc=$? at $(( $(date +%s) - T0 )) s"
grep -h -E "WRONG|Error|Traceback" $O/sweep.txt | head -5
grep -h "^SWEEP [0-9]" $O/sweep.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'
grep -h "^STAGES\|full-barrier" $O/stages.txt
SH="1,10240,5120 8,10240,5120 1,5120,8192 8,5120,8192"
CF=auto,swap_ab8x64s8,swap_ab8x64s8k2,swap_ab8x64s8k3,swap_ab8x64s8k4,swap_ab16x64s8k2
for w in 1 0; do
  CANDLE_FP8_PREFILL_WINDOW=$w timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full --only $CF --shapes $SH > $O/decode-w$w.txt 2>&1
  echo "decode sweep W=$w rc=$? at $(( $(date +%s) - T0 )) s"
done
timeout 80 python3 scripts/dev/hbm_floor.py --ctas 2 4 > $O/hbm.txt 2>&1
for w in 1 0; do echo "== W=$w"; grep -h "^SWEEP [0-9]" $O/decode-w$w.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'; done
grep "^HBM" $O/hbm.txt | head -6
