#!/bin/bash
# Session 23, call 2 (repo root, bundle/dev carried: bench, decode; working tree = HEAD + dev key
# persistent 256x128 s103 = the same tile with the next tile's weight scales prefetched by cp.async).
# 1. Harness: where the persistent tiles' time goes between the steady K-block rate and the whole
#    GEMM. Shapes chosen so the tiles make exactly 1 / 2 / 4 per CTA (N = 8448 = 66 x 128, hot,
#    weights L2-resident): per tile = T(2 per CTA) - T(1), per 16 K blocks = T(K 4096) - T(K 2048)
#    at 1 per CTA, so the per-tile transition (epilogue, scale fill, ring refill) = per tile - 2 x
#    per 16 K blocks. Prediction: 1-3 us per tile (4096^3's 131 us vs 4 x 32 x ~0.9 us = 115).
# 2. o (1x5120x8192, 8x...): bench "into" at split 3 vs the dispatched 4 (session 23 call 1's op
#    sweep: 13.84 vs 14.13 cold), two rounds; decode b1 A/B with the same override.
source scripts/dev/harness_prelude.sh
$H --lib /tmp/lib_plain.so check --shapes 300,144,384 1000,1024,5120 2048,4096,4096 > $O/check.txt 2>&1
tail -1 $O/check.txt
$H --lib /tmp/lib_plain.so sweep --no-full --only persistent256x128s3,persistent256x128s103,persistent128x128s5 \
  --shapes 256,8448,2048 256,8448,4096 512,8448,2048 512,8448,4096 1024,8448,4096 2048,8448,4096 \
  4096,4096,4096 2048,4096,4096 > $O/sweep.txt 2>&1
echo "harness done $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL" $O/*.txt | head
grep BITWISE $O/sweep.txt | awk '{print $NF}' | sort | uniq -c
grep "^SWEEP [0-9]" $O/sweep.txt

source scripts/dev/call_prelude.sh
for r in 1 2; do
  for v in d s3; do
    if [[ $v == s3 ]]; then e="CANDLE_FP8_SPLIT=5120x8192=3"; else e="X=1"; fi
    env $e timeout 100 $BIN/bench --shapes 1,5120,8192 8,5120,8192 --columns ours,into --samples 15 > $R/bench-$v-r$r.txt 2>&1
    echo "$v round $r rc=$? at $(elapsed)"
  done
done
python3 scripts/dev/ab_table.py $R d s3 --columns ours/into | tee $R/ab-o.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=default CANDLE_FP8_SPLIT=5120x8192=3" "1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
pack_out s23call2
