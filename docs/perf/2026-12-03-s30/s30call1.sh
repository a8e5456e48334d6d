#!/bin/bash
# Session 30, call 1 (prepared in session 29 as docs/perf/next-s30/midm-phases.sh; plus DeepGEMM's tiling at M = 128: 64x64 unsplit, 128 CTAs). More ingest per SM did not shorten the mid-M launches
# (docs/PERF.md "Session 29": a second CTA per SM lost in the decode step, two rings in one CTA
# 1-2 % slower), so measure where a 64-256 x 4096^2 launch spends its time on today's kernels:
#  1. the per-CTA timeline (-DFP8GEMM_TRACE: entry, griddepcontrol wait, first K block landed,
#     last K block done, end; median / max over CTAs) of the dispatched configs, hot and cold:
#     64 (small-M 64x64 x 8 split 2), 128 (64x128 x 6 split 2), 192 (64x128 x 6), 256
#     (persistent 128x128 x 5 split tail 2); q|k|v at 64 tokens (64x128 x 6, 80 CTAs);
#  2. the per-stage probe (-DFP8GEMM_TRACE_STAGES) of the same: period per K block, the
#     consumer's wait for data, the stage held by the MMA, the promotion.
# Expected output: ramp (entry -> first K block), main loop (first -> last K block) and tail
# (last K block -> end: epilogue, cluster sum) per shape; a K block period to compare with the
# MMA + promotion chain. Harness route, ~2 device minutes:
#   bash docs/perf/2026-12-03-s30/s30call1.sh
source scripts/dev/harness_prelude.sh
wait $BPID  # the stage-probe build shares build/ with the next one
EXTRA_FLAGS=-DFP8GEMM_TRACE bash scripts/dev/build.sh > $O/build-trace.txt 2>&1 && cp libfp8gemm.so /tmp/lib_trace.so
# (shape, its dispatched config as of session 29)
for pair in "64,4096,4096 small_m64x64s8k2" "128,4096,4096 small_m64x128s6k2" "192,4096,4096 small_m64x128s6" \
            "256,4096,4096 persistent128x128s5k2" "64,10240,5120 small_m64x128s6" "128,4096,4096 small_m64x64s8"; do
  set -- $pair
  timeout 40 $H --lib /tmp/lib_trace.so probe --only $2 --shapes $1 >> $O/probe.txt 2>&1
done
echo "probe at $(( $(date +%s) - T0 )) s"
timeout 120 $H --lib /tmp/lib_stages.so stages --shapes 64,4096,4096 128,4096,4096 192,4096,4096 256,4096,4096 \
  64,10240,5120 > $O/stages.txt 2>&1  # without --only: the dispatched config per shape
echo "stages rc=$? at $(( $(date +%s) - T0 )) s"
timeout 60 $H --lib /tmp/lib_stages.so stages --only small_m64x64s8 --shapes 128,4096,4096 64,4096,4096 > $O/stages-64x64.txt 2>&1
echo "stages-64x64 rc=$? at $(( $(date +%s) - T0 )) s"
grep -h "^STAGES" $O/stages.txt $O/stages-64x64.txt | head -30
grep -v "^ *$" $O/probe.txt | grep -v "^PROBE M N K" | head -40
