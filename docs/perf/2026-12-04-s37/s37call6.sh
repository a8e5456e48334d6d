#!/bin/bash
# (As run, except that its inline ab() became call_prelude.sh's config_ab: the same commands.)
# Session 37 call 6: stream-K small-M tiles (FP8GEMM_KIND_SMALL_M_STREAMK: 64 tokens x 128 / 64
# weight columns, one CTA per SM on every SM) where one 64 x 128 tile per CTA leaves SMs idle
# (q|k|v at 33-64 tokens: 80 tiles on 132 SMs; o / down: 40 tiles in 3 K splits + a reduce).
# bench / decode / gpu / gpu_reliability = HEAD + the kind + a PROVISIONAL rule (33-64 tokens,
# ⌈N/128⌉ < S, kb >= 32: stream-K 64 x 128); decode_base = the same without the rule.
# 1. forced_splits (the new tiles: ragged M, one / two token tiles, 1 / 4 / 5 SMs); stop if it fails.
# 2. "into" / op A/B against the configs dispatched before: q|k|v 48 / 64 1,64,128,8,1; o / down 64
#    1,64,128,6,3; 4096² 64 (not under the rule) against both stream-K tiles.
# 3. decode b48 / b64 base vs the rule; 4. the gpu suite with the rule.
# Prediction: q|k|v 64 "into" 19.7 -> 16-17 µs (all SMs streaming), o / down 64 -0.5 to -1.5.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 200 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-rel.txt 2>&1
rc=$?
echo "forced_splits rc=$rc $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-rel.txt | head -5 | cut -c1-400
if [[ $rc != 0 ]]; then pack_out s37call6; exit 0; fi
config_ab qkv64 64,10240,5120 1,64,128,8,1 -
config_ab qkv48 48,10240,5120 1,64,128,8,1 -
config_ab o64 64,5120,8192 1,64,128,6,3 -
config_ab down64 64,5120,25600 1,64,128,6,3 -
config_ab sq64 64,4096,4096 - 6,64,64,8,1 6,64,128,8,1
echo "bench at $(elapsed)"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_base X=rule" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
SUITE_TIMEOUT=150 run_suites gpu
pack_out s37call6
