#!/bin/bash
# Prepared in session 26 (not run). Session 26's call 7 put mid M on each SM's MMA + promotion rate
# (K-block period flat from 20 to 160 busy SMs), so stream-K (equal K-block shares over all SMs)
# should have run q|k|v at 128 tokens in ~13-15 us — it ran 24 (docs/PERF.md "Session 26").
# Find where its time goes: apply the patch to the device's copy of the tree, then
#  1. the per-stage probe (-DFP8GEMM_TRACE_STAGES; the CTA's first piece) of the persistent
#     128x128 tile plain vs stream-K on q|k|v 128 tokens (80 tiles), 40 tiles, 4096^2 at 256;
#  2. the per-CTA timeline (-DFP8GEMM_TRACE: entry, first K block, last K block, end per CTA) of
#     one launch, stream-K vs the warp-specialized tile dispatched today;
#  3. the sweep again (op path), to see the fix-up's share.
# Suspects: finishers waiting (the timeline's end minus last K block), per-piece ramps (scale
# cache refill, ring refill), the partial stores / reads, 64-bit divisions in next_stream.
# Harness route, ~3 device minutes: bash docs/perf/next-s27/streamk-probe.sh
P=docs/perf/2026-12-02-s26/stream-k.patch
git apply "$P" 2>/dev/null || patch -p1 < "$P" || { echo "patch does not apply"; exit 1; }
source scripts/dev/harness_prelude.sh
wait $BPID
timeout 90 $H --lib /tmp/lib_stages.so stages --only persistent128x128s5,persistent128x128s5sk \
  --shapes 128,10240,5120 128,5120,5120 256,4096,4096 > $O/stages.txt 2>&1
echo "stages rc=$? at $(( $(date +%s) - T0 )) s"
EXTRA_FLAGS=-DFP8GEMM_TRACE bash scripts/dev/build.sh > $O/build-trace.txt 2>&1 && cp libfp8gemm.so /tmp/lib_trace.so
timeout 90 $H --lib /tmp/lib_trace.so probe --only persistent128x128s5sk,warp_spec128x128s6 \
  --shapes 128,10240,5120 256,4096,4096 > $O/probe.txt 2>&1
echo "probe rc=$? at $(( $(date +%s) - T0 )) s"
timeout 60 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,persistent128x128s5sk \
  --shapes 64,10240,5120 128,10240,5120 256,4096,4096 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -h "^STAGES\|^SWEEP [0-9]" $O/stages.txt $O/sweep.txt
grep -v "^ *$" $O/probe.txt | head -40
