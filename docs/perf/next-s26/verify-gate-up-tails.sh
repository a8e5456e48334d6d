#!/bin/bash
# Prepared in session 25 (not run: no device time left). Commit 79627df dispatched split tails for
# gate_up (N = 51200) at M = 65-256 from a harness sweep (op path; docs/PERF.md "Session 25"):
# time them through the bench's "into" (the table's protocol) against the old dispatch, and the
# decode loop whose prefill runs gate_up at M = 100 (b1) and 1600 (b16, unchanged config).
# Predicted from the harness: 100 / 128 tokens -10..-20 %, 160 -17..-22 %, 192 -10 %, 256 -5..-7 %;
# TTFT b1 -0.6..-1.4 ms. If "into" disagrees with the harness, revert 79627df's M <= 256 part.
# Pack here (bundle route; session 25 left exactly this in bundle/dev: bench.xz / decode.xz built
# at 142cca1 (code = 79627df), bench_old.xz / decode_old.xz at 39972e4, anchors.py):
#   cargo release build with --features cuda at HEAD -> bench, decode;
#   the same at 39972e4 (a git worktree, its own CARGO_TARGET_DIR) -> bench_old, decode_old;
#   CARGO_TARGET_DIR=<HEAD's> bash scripts/dev/pack.sh bench decode;
#   CARGO_TARGET_DIR=<39972e4's> bash scripts/dev/pack.sh bench=old decode=old.
# Run: bash docs/perf/next-s26/verify-gate-up-tails.sh (carry bundle/dev); ~4 device minutes.
source scripts/dev/call_prelude.sh
AB_COLUMNS=ours/into/lt bench_ab 2 new= old@bench_old= -- --shapes 80,51200,5120 100,51200,5120 128,51200,5120 160,51200,5120 192,51200,5120 256,51200,5120 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-gate-up.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=16 timeout 150 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "1 16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/decode.txt
pack_out s26call1
