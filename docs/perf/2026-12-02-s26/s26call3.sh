#!/bin/bash
# Session 26, call 3 (bundle route): swap-AB 32-token tiles at M = 17-32 from one wave of 64-row
# weight tiles (N >= 8448; before: 1.5 waves). bench (new dispatch) vs bench_old (today's
# dispatch; the build also held the stream-K experiment, unused by the dispatch), two
# interleaved rounds, op / into / our cuBLASLt; gate_up at 32 as a control (same config both).
# Predicted from call 1's sweep (op path): q|k|v at 32 tokens -10 % (18.4 vs 20.4 us).
# Then the peers in the same run for the two rows this session changed (q|k|v 32, gate_up 128),
# and the gpu suite on the new build.
source scripts/dev/call_prelude.sh
AB_COLUMNS=ours/into/lt bench_ab 2 new= old@bench_old= -- --shapes 17,10240,5120 24,10240,5120 32,10240,5120 32,51200,5120 128,51200,5120 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-swap32.txt
timeout 150 python3 bundle/dev/anchors.py --shapes 32,10240,5120 128,51200,5120 --no-ceilings --json $R/anchors.json > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"; grep -v "^#" $R/anchors.log | tail -12
run_suites gpu
pack_out s26call3
