#!/bin/bash
# Session 33, call 4: the down-only rule (s3c: swap-AB 32 x 64 split 3 at 25-32 tokens, S/2 <
# N/64 < S, K >= 16384) after call 3 (rules A/B lost decode b32 by 0.17 ms; o's hot "into" lost
# 1.6 us). Forced splits with the swap-AB 32-token tile (gpu_reliability_s3c), bench A/B at
# 24 / 25 / 32 x 5120 x 25600, decode b32 s3c vs old (two runs each); then the same-run table with
# bench_s3c if its b32 TPOT mean <= old's + 0.01 ms and forced_splits passed, else with the old
# bench (the rule decided before the run, printed below).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 120 $BIN/gpu_reliability_s3c forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
frc=$?; echo "forced_splits rc=$frc $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced.txt | head -5
AB_COLUMNS=ours/into bench_ab 1 s3c@bench_s3c= old= -- --shapes 24,5120,25600 25,5120,25600 32,5120,25600 \
  --columns ours,into --samples 15 --no-check --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
echo "bench_ab rc=$? at $(elapsed)"; tail -7 $R/ab.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_s3c X=old" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
new=$(awk '$1 ~ /decode_s3c/ {s+=$3; n++} END {print s/n}' $R/dec/sweep-table.txt)
old=$(awk '$1 == "X=old" {s+=$3; n++} END {print s/n}' $R/dec/sweep-table.txt)
if [[ $frc == 0 ]] && awk -v a=$new -v b=$old 'BEGIN {exit !(a <= b + 0.01)}'; then
  echo "TABLE WITH s3c (b32 $new vs $old ms)"; cp $BIN/bench_s3c $BIN/bench
else
  echo "TABLE WITH old (b32 $new vs $old ms, forced rc=$frc)"
fi
pack_out s33call5ab
R=$OUT/t; mkdir -p $R
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
