#!/bin/bash
# Session 27 call 2: where stream-K's time goes, per piece. The per-tile trace records
# (FP8GEMM_TRACE_TILE: start, first K block, last K block, fix-up, end of every tile or piece
# of a persistent CTA) of one launch, stream-K vs the plain persistent 128x128 tile; then the
# stream-K grid on fewer SMs (does it scale with SMs at all?).
source scripts/dev/harness_prelude.sh
wait $BPID
EXTRA_FLAGS=-DFP8GEMM_TRACE bash scripts/dev/build.sh > $O/build-trace.txt 2>&1 && cp libfp8gemm.so /tmp/lib_trace.so
echo "trace build rc=$? at $(( $(date +%s) - T0 )) s"
timeout 120 $H --lib /tmp/lib_trace.so probe --only persistent128x128s5sk,persistent128x128s5 \
  --shapes 128,10240,5120 256,4096,4096 128,5120,5120 > $O/probe.txt 2>&1
echo "probe rc=$? at $(( $(date +%s) - T0 )) s"
S=persistent128x128s5sk
timeout 120 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,persistent128x128s5,$S,$S@120sms,$S@100sms,$S@80sms,$S@66sms \
  --shapes 128,10240,5120 256,4096,4096 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^ *$" $O/probe.txt | grep -v "p10/p50"
grep -h "^SWEEP [0-9]\|WRONG" $O/sweep.txt
