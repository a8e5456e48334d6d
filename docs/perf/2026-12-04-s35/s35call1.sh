#!/bin/bash
# Session 35 call 1 = next-s35 call1.sh + call3.sh in one call (one cold start):
# forced_splits on f6fd059 (fix-up helpers + streamk_units, not yet run on a GPU), decode b32 A/B
# of the kept rule vs decode_old (c911a95's dispatch; predicted <= 10.77 vs ~10.91 ms), then
# issue #2's accuracy mode over 256 steps (tiny default + Qwen3-32B architecture).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 150 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced.txt | head -5
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
timeout 100 $BIN/decode --device cuda --check-accuracy 256 --max-new-tokens 8 > $R/acc-tiny.log 2>&1
echo "acc tiny rc=$? at $(elapsed)"
timeout 330 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --check-accuracy 256 \
  --max-new-tokens 8 > $R/acc-32b.log 2>&1
echo "acc 32b rc=$? at $(elapsed)"
grep -h "top-1 agreement\|max |" $R/acc-tiny.log $R/acc-32b.log
pack_out s35call1
