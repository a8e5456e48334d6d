#!/bin/bash
# Session 29 call 6 (harness): the 64 x 64 tile with two math warpgroups taking alternate K
# blocks AND two TMA issuers (development key s208 = SmallM<64, 8, false, 2, 2>: two full rings
# in one CTA, one CTA per SM) against the one-warpgroup tile (auto at 33-64 x 4096^2 = 64 x 64 x 8
# split 2). Session 28's interleaved 64 x 64 had one issuer for both warpgroups.
source scripts/dev/harness_prelude.sh
timeout 150 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,small_m64x64s8k2,small_m64x64s208k2,small_m64x64s208,small_m64x64s208k3 \
  --shapes 64,4096,4096 48,4096,4096 64,10240,5120 64,5120,25600 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "WRONG|rror" $O/sweep.txt | head -5
python3 scripts/dev/summarize.py sweep $O/sweep.txt
