#!/bin/bash
# Session 36 call 3: where a two-tile stream-K CTA loses its time (call 2: loading every tile's
# scales at entry changed nothing — piece 2 still starts when the SM's other CTAs finish).
# bench_trace = HEAD kernels + per-piece tile records for stream-K (-DFP8GEMM_TRACE);
# bench_old = HEAD kernels (2e7da74). Stream-K q|k|v 16 (5,16,64,7,3) op and "into", traced,
# per piece (scripts/dev/streamk_pieces.py), with the paced first fill (default window 1) and
# without (CANDLE_FP8_PREFILL_WINDOW=0); then bench A/B of those settings, two rounds.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
Q=16,10240,5120
tr() {  # tr NAME COLUMN [ENV=VALUE]
  env $3 timeout 60 $BIN/bench_trace --shapes $Q --columns $2 --no-cold --config 5,16,64,7,3 --trace-out $R/$1.bin > $R/$1.bench.txt 2>&1
  echo "== trace $1 rc=$? $(grep -E '^ *m=[0-9]+ *hot' $R/$1.bench.txt | awk '{printf "op %s into %s", $4, $6}')"
  python3 scripts/dev/streamk_pieces.py $R/$1.bin --launches 8 > $R/$1.pieces.txt 2>&1
  rm -f $R/$1.bin
  cat $R/$1.pieces.txt
}
tr sk3-op ours
tr sk3-into into
tr sk3-op-w0 ours CANDLE_FP8_PREFILL_WINDOW=0
echo "traces at $(elapsed)"
for r in 1 2; do
  for v in w1 w0 ef0; do
    e=""; [[ $v == w0 ]] && e=CANDLE_FP8_PREFILL_WINDOW=0; [[ $v == ef0 ]] && e=CANDLE_FP8_WEIGHT_EVICT_FIRST=0
    for c in 5,16,64,7,3 2,16,64,8,1; do
      f=$R/ab-$v-$c-r$r.txt
      env $e timeout 60 $BIN/bench_old --shapes $Q --columns ours,into --config $c > $f 2>&1
      echo "$v $c r$r rc=$? $(grep -E '^ *m=[0-9]+ *(hot|cold)' $f | awk '{printf "%s op %s into %s | ", $2, $4, $6}')"
    done
  done
done
echo "bench at $(elapsed)"
pack_out s36call3
