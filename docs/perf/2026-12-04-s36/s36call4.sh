#!/bin/bash
# (As run. Its inline ab() repeats the other call's; for new calls use call_prelude.sh's bench_ab.)
# Session 36 call 4: the stream-K publish off the math path (a warp of the producer warpgroup
# raises the flag; call 3's trace: the flag's release fence held the math warps 4-10 µs).
# bench/gpu* = the change; bench_old = HEAD (2e7da74); bench_trace = the change, traced.
# 1. checks: gpu_reliability forced_splits (stream-K on all SMs, 1, 4, 5 SMs), dev_variants,
#    sanitizer_boundary_shapes; racecheck + synccheck of forced_splits (hopper only); gpu_fused.
# 2. bench A/B, two interleaved rounds: q|k|v 12 / 16 / 32 forced onto stream-K, q|k|v 16 / 32
#    dispatched (unchanged kernels), gate_up 16 / 32 (dispatched: stream-K).
# 3. per-piece trace of the new stream-K q|k|v 16 op.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 300 $BIN/gpu_reliability forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "forced_splits + dev_variants + sanitizer_boundary rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-rel.txt | head -5
for tool in racecheck synccheck; do
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
    $BIN/gpu_reliability forced_splits --test-threads=1 > $R/$tool.txt 2>&1
  echo "$tool forced_splits rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY\|test result' $R/$tool.txt | sort | uniq -c | tr '\n' ' ') at $(elapsed)"
done
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
ab qkv12-sk3 12,10240,5120 5,16,64,7,3
ab qkv32-sk2 32,10240,5120 5,32,64,8,2
ab qkv16-dflt 16,10240,5120
ab qkv32-dflt 32,10240,5120
ab gu16 16,51200,5120
ab gu32 32,51200,5120
ab qkv8-sk3 8,10240,5120 5,8,64,8,3
ab qkv8-dflt 8,10240,5120
echo "bench at $(elapsed)"
timeout 60 $BIN/bench_trace --shapes 16,10240,5120 --columns ours --no-cold --config 5,16,64,7,3 --trace-out $R/t.bin > $R/t.bench.txt 2>&1
echo "trace rc=$? $(grep -E '^ *m=[0-9]+ *hot' $R/t.bench.txt)"
python3 scripts/dev/streamk_pieces.py $R/t.bin --launches 8 > $R/sk3-op.pieces.txt 2>&1; rm -f $R/t.bin
cut -c1-230 $R/sk3-op.pieces.txt
pack_out s36call4
