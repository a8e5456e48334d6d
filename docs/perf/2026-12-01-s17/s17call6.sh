#!/bin/bash
# Session 17, call 6: batch-1 decode under attention plans (position splits S, head splits H;
# the default at b1 is 5 x 8 with the last split merging) and K splits of the o / down GEMMs
# (their partials are summed by the next norm), interleaved, two rounds.
source scripts/dev/call_prelude.sh
dec() { timeout 120 env $2 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 \
  --max-new-tokens 48 --ignore-eos --batch 1 $3 > $R/d-$1.log 2>&1
  printf '%-34s %s\n' "$1" "$(sed -n 's/^TPOT *mean \([0-9.]*\) ms, p50 \([0-9.]*\) ms.*/\1 \2/p' $R/d-$1.log)" | tee -a $R/table.txt; }
dec warmup X=1 ""
for r in 1 2; do
  dec default-r$r X=1 ""
  for plan in one:1,8 one:2,8 one:3,8 cluster; do dec "$plan-r$r" X=1 "--step-attention $plan"; done
  for sp in 5120x25600=5 5120x25600=6 5120x25600=8 5120x8192=5 5120x8192=6; do dec "split-$sp-r$r" CANDLE_FP8_SPLIT=$sp ""; done
done
echo "done at $(elapsed)"
pack_out s17call6
