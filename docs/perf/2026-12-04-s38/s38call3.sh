#!/bin/bash
# Session 38 call 3: the plain gate/up-width GEMM at 9-16 tokens (>= 3 waves of 64-row tiles) on
# the 16-token stream-K tile, dispatched 7 stages x 3 CTAs per SM vs 8 stages x 2 per SM (call 2,
# after the table: "into" 65.3-65.4 vs 66.1 µs hot, 66.3-66.5 vs 66.7-66.8 cold). Four
# interleaved rounds (config_ab twice) on a fresh machine, four shapes of that rule.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for round in 1 2; do
  for s in 16,51200,5120 12,51200,5120 9,51200,5120 16,25600,5120; do
    config_ab "g$round-$s" $s - 5,16,64,8,2
  done
done
echo "done at $(elapsed)"
pack_out s38call3
