#!/bin/bash
# Session 27 call 4: the tile transitions of the persistent schedules at large M. Call 3's
# per-tile records showed ~1-1.4 us from a tile's start to its first K block landed on every
# tile of a stream-K CTA, plus ~0.4-0.7 us of epilogue: if plain persistent tiles pay the same,
# a CTA with 4 tiles idles its tensor cores ~6 us of 2048x4096^2's 65 (DeepGEMM: 57.9).
# Per-tile records (trace build) of the dispatched large-M tiles, one launch hot and cold.
source scripts/dev/harness_prelude.sh
wait $BPID
EXTRA_FLAGS=-DFP8GEMM_TRACE bash scripts/dev/build.sh > $O/build-trace.txt 2>&1 && cp libfp8gemm.so /tmp/lib_trace.so
echo "trace build rc=$? at $(( $(date +%s) - T0 )) s"
timeout 150 $H --lib /tmp/lib_trace.so probe --only persistent256x128s3,persistent128x128s5 \
  --shapes 2048,4096,4096 2048,10240,5120 512,4096,4096 > $O/probe.txt 2>&1
echo "probe rc=$? at $(( $(date +%s) - T0 )) s"
timeout 90 $H --lib /tmp/lib_stages.so stages --only persistent256x128s3,persistent128x128s5 \
  --shapes 2048,4096,4096 > $O/stages.txt 2>&1
echo "stages rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^ *$" $O/probe.txt | grep -v "p10/p50"
grep -h "^STAGES\|full-barrier" $O/stages.txt
