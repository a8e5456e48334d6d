#!/bin/bash
# Session 26, call 2: stream-K for the persistent tiles (split_k = FP8GEMM_SPLIT_STREAM_K: every
# CTA an equal share of all tiles' K blocks, pieces summed in the kernel).
# 1. Correctness: harness `check` (every compiled config incl. stream-K on all SMs and on 7, on
#    ragged / random shapes, NaN-poisoned outputs, against torch) and gpu_reliability's
#    forced_splits (bundle: CPU reference, ragged M / N, stream-K on 0 / 4 / 5 SMs, bitwise
#    repeatable), ffi unit tests (workspace sizes, auto_config mirror).
# 2. Speed (harness sweep, op path, hot / cold): stream-K against today's config where the tiles
#    leave SMs idle or run a partial round. Predicted: q|k|v M = 96-128 (80 tiles on 80 SMs ->
#    24-25 K blocks on every SM) 21 -> ~14-15 us; 4096^2 M = 160-256 -10..-25 %; gate_up 32-128
#    ~-5 %; the decode-size small-M shapes (4096^2 M <= 64) slower (the fix-up reads as many
#    bytes as the main loop there).
source scripts/dev/call_prelude.sh
timeout 60 $BIN/candle_fp8 ffi --test-threads=1 > $R/test-ffi.txt 2>&1
echo "ffi rc=$? $(grep '^test result' $R/test-ffi.txt) at $(elapsed)"
timeout 200 $BIN/gpu_reliability forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "forced_splits + dev_variants + sanitizer_boundary_shapes rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
pack_out s26call2tests
source scripts/dev/harness_prelude.sh
kill $BPID 2>/dev/null
timeout 150 $H --lib /tmp/lib_plain.so check > $O/check.txt 2>&1
echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -20
for tool in racecheck memcheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $H --lib /tmp/lib_plain.so sanitize --quick > $O/$tool.txt 2>&1
  echo "$tool rc=$? $(grep -h 'SUMMARY\|sanitize driver' $O/$tool.txt | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
done
SW="timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full"
SK=auto,persistent128x128s5sk,persistent256x128s3sk
$SW --only $SK --shapes 32,10240,5120 64,10240,5120 96,10240,5120 128,10240,5120 > $O/sweep-qkv.txt 2>&1
$SW --only $SK --shapes 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 > $O/sweep-sq.txt 2>&1
$SW --only $SK --shapes 32,51200,5120 64,51200,5120 128,51200,5120 256,51200,5120 > $O/sweep-gu.txt 2>&1
$SW --only $SK --shapes 64,5120,8192 128,5120,8192 64,5120,25600 128,5120,25600 > $O/sweep-od.txt 2>&1
$SW --only $SK --shapes 512,4096,4096 1024,4096,4096 2048,4096,4096 2048,10240,5120 2048,5120,25600 > $O/sweep-big.txt 2>&1
echo "sweeps at $(( $(date +%s) - T0 )) s"
grep -h -E "WRONG|Error|Traceback" $O/sweep-*.txt | head -5
for f in $O/sweep-*.txt; do grep -h "^SWEEP [0-9]" $f; done | awk '{printf "%5s %6s %6s %-26s %8s %8s\n", $2, $3, $4, $5, $6, $7}'
