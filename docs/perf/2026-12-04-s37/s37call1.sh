#!/bin/bash
# (As run in session 37 call 1, prepared in session 36 as docs/perf/next-s37/call2.sh; the patch is 18d837c.)
# Prepared in session 36 (not run): the stream-K storer's fix-up with its flags polled by warp 0's
# lanes in parallel and the partials loaded two at a time (storer-parallel.patch; the same bits).
# Session 36's per-piece trace: a storer spends 1.5-2.4 µs from its last K block to its end,
# ~1 µs per L2 round trip under the weight stream, one per publisher for the flags and one per
# publisher for the partials. Prediction: stream-K q|k|v 16 op and "into" -0.5 to -1 µs (into
# ~15.3-15.7: the row met robustly), gate/up 16 / 32 within ±0.3, decode b16 -0.02 to -0.06 ms.
# bundle/dev: bench.xz, decode.xz (d136849), bench_s37.xz, decode_s37.xz, gpu_reliability_s37.xz
# (HEAD + storer-parallel.patch, built in target/s37). Do not carry gpu.xz (carry limit).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 300 $BIN/gpu_reliability_s37 forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "forced_splits + dev_variants + sanitizer_boundary rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-rel.txt | head -5
CANDLE_FP8_TEST_PROVIDERS=hopper timeout 100 compute-sanitizer --tool synccheck --error-exitcode 9 \
  $BIN/gpu_reliability_s37 forced_splits --test-threads=1 > $R/synccheck.txt 2>&1
echo "synccheck rc=$? $(grep -h 'ERROR SUMMARY' $R/synccheck.txt) at $(elapsed)"
bench_ab 2 new@bench_s37= old@bench= -- --shapes 16,10240,5120 12,10240,5120 16,51200,5120 32,51200,5120 --columns ours,into
echo "bench at $(elapsed)"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=s36 DECODE_BIN=$BIN/decode_s37" "16 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out next37call2
