#!/bin/bash
# Session 38 call 5: the final rule (gate/up-width at 9-16 tokens with >= 32 K blocks on the
# 16-token stream-K tile, 8 stages two per SM) against the old binary, with the torch peers
# (anchors.py: cuBLASLt, Triton) timed in the same run on those shapes.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 200 python3 bundle/dev/anchors.py --shapes 16,51200,5120 12,51200,5120 --no-ceilings --json $R/anchors.json > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
grep -E "51200" $R/anchors.log | head -12
bench_ab 3 new= old@bench_old= -- --shapes 16,51200,5120 12,51200,5120 9,25344,2048 --columns ours,into
echo "done at $(elapsed)"
pack_out s38call5
