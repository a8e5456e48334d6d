#!/bin/bash
# Session 36 call 1 (bundle/dev: bench and bench_trace = the same code built with
# CANDLE_FP8_NVCC_FLAGS=-DFP8GEMM_TRACE). Part A = session 35's prepared call 6 plus stream-K at
# 1 CTA per SM: `bench --config` (first GPU run) on q|k|v at 16 tokens, two interleaved rounds —
# the dispatched one-tile swap-AB 16x64 s8 forced through the flag must match the default run.
# Part B: per-CTA traces of the hot chains ("into") and the lone launches ("ours") of q|k|v 16
# (dispatched / stream-K 3 per SM) and of gate_up 16 at stream-K 3 and 2 per SM (session 35: the
# 2-per-SM chain runs 30 % slower, unexplained); the summaries and per-CTA CSVs come back.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
QKV=16,10240,5120; GU=16,51200,5120
for r in 1 2; do
  for c in dflt 2,16,64,8,1 5,16,64,7,3 5,16,64,7,2 5,16,64,7,1; do
    a=""; [[ $c != dflt ]] && a="--config $c"
    f=$R/a-$c-r$r.txt
    timeout 60 $BIN/bench --shapes $QKV --columns ours,into $a > $f 2>&1
    echo "A r$r $c rc=$? $(grep -E '^ *m=16 *(hot|cold)' $f | awk '{printf "%s ours %s into %s | ", $2, $4, $6}') $(grep -iE 'relerr|wrong|error|mismatch' $f | head -2)"
  done
done
echo "part A at $(elapsed)"
tr() {  # tr NAME SHAPE COLUMN CONFIG
  local a=""; [[ $4 != dflt ]] && a="--config $4"
  timeout 60 $BIN/bench_trace --shapes $2 --columns $3 --no-cold $a --trace-out $R/$1.bin > $R/$1.bench.txt 2>&1
  echo "B $1 rc=$? $(grep -E '^ *m=16 *hot' $R/$1.bench.txt | awk '{printf "ours %s into %s", $4, $6}') $(grep '^trace' $R/$1.bench.txt)"
  python3 scripts/dev/trace_timeline.py $R/$1.bin --chain 24 --ctas $R/$1.csv > $R/$1.tl.txt 2>&1
  rm -f $R/$1.bin
  sed -n '1,6p' $R/$1.tl.txt
}
tr qkv-dflt-into $QKV into dflt
tr qkv-dflt-op $QKV ours dflt
tr qkv-sk3-into $QKV into 5,16,64,7,3
tr qkv-sk3-op $QKV ours 5,16,64,7,3
tr qkv-sk1-into $QKV into 5,16,64,7,1
tr gu-sk3-into $GU into 5,16,64,7,3
tr gu-sk2-into $GU into 5,16,64,7,2
tr gu-sk2-op $GU ours 5,16,64,7,2
echo "part B at $(elapsed)"
pack_out s36call1
