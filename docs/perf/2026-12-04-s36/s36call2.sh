#!/bin/bash
# (As run. Its inline ab() repeats the other call's; for new calls use call_prelude.sh's bench_ab.)
# Session 36 call 2: stream-K tiles load every tile's weight scales at entry (the call-1 trace:
# two-tile CTAs of q|k|v 16 started their second tile at ~13 µs whatever the first's size).
# bench/gpu* = the change; bench_old = before (2e7da74);
# bench_trace = the change with -DFP8GEMM_TRACE.
# 1. checks: gpu_reliability forced_splits (now also one stream-K CTA on 1 SM: the per-tile
#    fallback), gpu_fused (stream-K gate/up reference).
# 2. bench A/B, two interleaved rounds, "op" and "into": q|k|v 16 / 32 forced onto stream-K and
#    dispatched; gate_up 16 / 32 (dispatched: stream-K 3 / 2 per SM).
# 3. traces of the new stream-K q|k|v 16 (op, into).
# (gpu and the decode A/B: call 3 — the carry limit.)
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 200 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
SUITE_TIMEOUT=200 run_suites gpu_fused
ab() {  # ab TAG SHAPE [CONFIG]
  local a=""; [[ -n $3 ]] && a="--config $3"
  for r in 1 2; do
    for v in new old; do
      local b=bench; [[ $v == old ]] && b=bench_old
      timeout 60 $BIN/$b --shapes $2 --columns ours,into $a > $R/ab-$1-$v-r$r.txt 2>&1
      echo "$1 $v r$r rc=$? $(grep -E '^ *m=[0-9]+ *(hot|cold)' $R/ab-$1-$v-r$r.txt | awk '{printf "%s op %s into %s | ", $2, $4, $6}') $(grep -iE 'relerr|wrong|error|mismatch' $R/ab-$1-$v-r$r.txt | head -2)"
    done
  done
}
ab qkv16-sk3 16,10240,5120 5,16,64,7,3
ab qkv16-dflt 16,10240,5120
ab qkv32-sk2 32,10240,5120 5,32,64,8,2
ab qkv32-dflt 32,10240,5120
ab gu16 16,51200,5120
ab gu32 32,51200,5120
ab qkv12-sk3 12,10240,5120 5,16,64,7,3
echo "bench at $(elapsed)"
tr() {  # tr NAME SHAPE COLUMN CONFIG
  timeout 60 $BIN/bench_trace --shapes $2 --columns $3 --no-cold --config $4 --trace-out $R/$1.bin > $R/$1.bench.txt 2>&1
  echo "trace $1 rc=$? $(grep -E '^ *m=[0-9]+ *hot' $R/$1.bench.txt | awk '{printf "op %s into %s", $4, $6}')"
  python3 scripts/dev/trace_timeline.py $R/$1.bin --chain 24 --ctas $R/$1.csv > $R/$1.tl.txt 2>&1
  rm -f $R/$1.bin
  sed -n '3,3p' $R/$1.tl.txt
}
tr qkv-sk3-op 16,10240,5120 ours 5,16,64,7,3
tr qkv-sk3-into 16,10240,5120 into 5,16,64,7,3
tr qkv32-sk2-op 32,10240,5120 ours 5,32,64,8,2
echo "traces at $(elapsed)"
pack_out s36call2
