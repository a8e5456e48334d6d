#!/bin/bash
# Session 27 call 3: stream-K / split-tail publishes no longer wait for their stores (the TMA
# thread counts the piece once it has issued every load; tail_fixup.cuh). Predicted from call 2's
# per-tile records: the publish (1.8 us median, up to 3.7) and the next piece's 0.7 us ramp leave
# the critical path: q|k|v 128 tokens stream-K 23.3-24.4 -> ~20-21 us; gate_up 128 ~ -3 us.
# 1. correctness: harness check (every config incl. stream-K, split tails), racecheck/memcheck.
# 2. per-tile records (trace build) of stream-K, then the sweep: new lib vs the old one
#    (bundle/old = commit c52df81, stream-K with the waiting publish), auto and stream-K, and
#    the large-M auto configs (persistent kernels changed: the TMA thread's wait at its end).
source scripts/dev/harness_prelude.sh
timeout 150 $H --lib /tmp/lib_plain.so check > $O/check.txt 2>&1
echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -10
for tool in racecheck memcheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $H --lib /tmp/lib_plain.so sanitize --quick > $O/$tool.txt 2>&1
  echo "$tool rc=$? $(grep -h 'SUMMARY\|sanitize driver' $O/$tool.txt | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
done
wait $BPID
(cd bundle/old && bash scripts/dev/build.sh > $O/build-old.txt 2>&1 && cp libfp8gemm.so /tmp/lib_old.so) &
OPID=$!
EXTRA_FLAGS=-DFP8GEMM_TRACE bash scripts/dev/build.sh > $O/build-trace.txt 2>&1 && cp libfp8gemm.so /tmp/lib_trace.so
timeout 120 $H --lib /tmp/lib_trace.so probe --only persistent128x128s5sk \
  --shapes 128,10240,5120 256,4096,4096 128,51200,5120 > $O/probe.txt 2>&1
echo "probe rc=$? at $(( $(date +%s) - T0 )) s"
wait $OPID; echo "old build rc=$? at $(( $(date +%s) - T0 )) s"
S=persistent128x128s5sk
for lib in plain old; do
  SW="timeout 150 $H --lib /tmp/lib_$lib.so sweep --no-full"
  $SW --only auto,$S --shapes 64,10240,5120 128,10240,5120 160,4096,4096 192,4096,4096 256,4096,4096 \
    32,51200,5120 64,51200,5120 128,51200,5120 256,51200,5120 128,5120,8192 128,5120,25600 > $O/sweep-$lib.txt 2>&1
  $SW --only auto --shapes 2048,4096,4096 2048,10240,5120 4096,4096,4096 > $O/sweep-big-$lib.txt 2>&1
  echo "sweep $lib at $(( $(date +%s) - T0 )) s"
done
grep -h -E "WRONG|Error|Traceback" $O/sweep-*.txt | head -5
grep -v "^ *$" $O/probe.txt | grep "TILES\|^PROBE"
for lib in plain old; do echo "== $lib"; grep -h "^SWEEP [0-9]" $O/sweep-$lib.txt $O/sweep-big-$lib.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'; done
