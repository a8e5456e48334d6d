#!/bin/bash
# Session 21, call 5: two TMA issuer threads (warps 0 and 1 of the producer warpgroup issue
# the loads of alternate stages) on the tokens-on-M schedules, as development keys (stages + 100).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu_reliability &&
#   cp docs/perf/2026-12-02-s21/s21call5.sh bundle/dev/
# Why: mid-M main loops run at ~200-300 ns per K block whatever the ring depth (session 9-10),
# and the single producer thread's per-stage sequence (wait empty, expect_tx, 2-3 TMA issues)
# is one serial chain no ring depth can hide. If that chain sets the pace, two issuers halve it.
# 0. Correctness first: dev_variants_match_reference (CPU reference, bitwise equal to the base
#    tiles, even / odd K blocks, splits) and forced_splits.
# 1. bench ours / into, base vs --dev-variant, two interleaved rounds. Prediction: M = 129-256
#    at N = 4096 (small-M 64 x 128, K-interleaved warpgroups: the consumers have two K blocks of
#    time each, so the producer is the suspect) faster by up to ~30 %; if 0 %, the per-stage
#    cost is not on the issuing thread.
source scripts/dev/call_prelude.sh
timeout 300 $BIN/gpu_reliability dev_variants forced_splits --test-threads=1 > $R/test-dev.txt 2>&1
echo "dev_variants + forced_splits rc=$? $(grep '^test result' $R/test-dev.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-dev.txt | head -5
SH="64,4096,4096 48,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 256,4096,4096 64,10240,5120
64,51200,5120 128,10240,5120 128,5120,8192 128,5120,25600 128,51200,5120 512,4096,4096 2048,4096,4096
4096,4096,4096 2048,10240,5120"
bench_ab 2 base= dev=--dev-variant -- --shapes $SH --columns ours,into --samples 15 --no-check
python3 scripts/dev/ab_table.py $R base dev | tee $R/ab-table.txt
grep -h "^config" $R/bench-dev-r1.txt | sort | uniq -c
echo "done at $(elapsed)"
pack_out s21call5
