#!/bin/bash
# Session 33, call 1 (prepared in session 32 as next-s33/split2-and-suites.sh, run as is). Bundle route, carry bundle/dev (~41 MB: bench and decode at
# 65bc4e0's kernels; bench_s2 / decode_s2 = 4c146f7 + swap16-split2.patch; gpu / gpu_reliability at
# 937ef96, the dequant provider's 64-bit bf16 rounding). ~9 device minutes. Writes its log to
# $OUT as it goes and packs before anything optional (session 32's call 1 lost its files).
# 1. swap-AB 16-token tile at split 2 on 7 stages (320 CTAs, three per SM, one wave) for q|k|v at
#    9-16 tokens (where the doubled grid fits one wave at three per SM: N/64 tiles in [S, 1.5 S]),
#    which runs 160 CTAs on two per SM today and is 2 us slower "into" than the op:
#    bench "into" / op, two interleaved rounds, then decode b16 (the judge: session 17's split 2 on
#    8 stages was 19.1 vs 18.2 us and b16 +0.34 ms — two waves; session 20's 7-stage tile at split
#    1 was faster alone and slower in the step).
# 2. gpu_reliability whole, then gpu, in the time left (each cut so that the pack runs before
#    570 s): does large_mn_no_index_overflow now finish (and pass)?
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
AB_COLUMNS=ours/into bench_ab 2 new@bench_s2= old= -- --shapes 9,10240,5120 12,10240,5120 16,10240,5120 \
  8,10240,5120 16,12288,5120 16,16384,4096 --columns ours,into --samples 15 --no-check --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
echo "bench_ab rc=$? at $(elapsed)"; tail -14 $R/ab.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_s2 X=old" "16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
left() { echo $(( 570 - ($(date +%s) - T0) )); }
SUITE_TIMEOUT=$(left) run_suites gpu_reliability
(( $(left) > 100 )) && SUITE_TIMEOUT=$(left) run_suites gpu
pack_out s33split2
