#!/bin/bash
# Session 21, call 4: ping-pong math warpgroups (kPingPong: a warpgroup issues its MMA unit
# only once the other's previous unit has completed, so each promotion overlaps the other's
# MMAs) on the three two-warpgroup schedules, as development keys (stages + 100).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu_reliability &&
#   cp docs/perf/2026-12-02-s21/s21call4.sh bundle/dev/
# 0. Correctness first: pingpong_variants_match_reference (CPU reference, bitwise equal to the
#    base tiles, even / odd K blocks) and forced_splits.
# 1. bench ours / into, base vs --pingpong (the dispatcher's config with its ping-pong key),
#    two interleaved rounds. Prediction: warp-specialized 128 x 128 (M = 65-128 wide N; per K
#    block 480 ns measured vs ~280 ns of MMA) up to -30 %; small-M 64 x 128 with K-interleaved
#    warpgroups (M = 129-256 at N = 4096) little (ingest-bound, ~283 ns per 24 KB stage);
#    persistent (M > 256) a few % at most (power cap).
source scripts/dev/call_prelude.sh
timeout 300 $BIN/gpu_reliability pingpong forced_splits --test-threads=1 > $R/test-pingpong.txt 2>&1
echo "pingpong + forced_splits rc=$? $(grep '^test result' $R/test-pingpong.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-pingpong.txt | head -5
SH="128,10240,5120 128,5120,8192 128,5120,25600 128,51200,5120 100,51200,5120 64,51200,5120 64,10240,5120
160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 512,4096,4096 2048,4096,4096 4096,4096,4096
2048,10240,5120 2048,5120,25600"
bench_ab 2 base= pingpong=--pingpong -- --shapes $SH --columns ours,into --samples 15 --no-check
python3 scripts/dev/ab_table.py $R base pingpong | tee $R/ab-table.txt
grep -h "^config" $R/bench-pingpong-r1.txt | sort | uniq -c
echo "done at $(elapsed)"
pack_out s21call4
