#!/bin/bash
# Session 34, call 3: the stream-K dispatch (9-16 tokens over >= S tiles of 64 rows: swap-AB
# 16-token stream-K, 7 stages, 3 CTAs per SM; 17-32 tokens over >= S tiles: 32-token stream-K,
# 2 per SM) against the build before it (bench_old / decode_old: same kernels, old dispatch).
# Carry bundle/dev. Predictions (from call 2's harness sweep): q|k|v 9-16 "into" 17.8 -> ~15.9 hot,
# op ~16.0 -> ~15.9; gate_up 16 into 63.8 -> ~61.5 (the row would be met); q|k|v 32 -0.6 us;
# controls (1-8 tokens, o / down 16) unchanged; decode b16 -0.1 to -0.15 ms (q|k|v, 64 layers x
# ~2 us), b32 -0.04 ms. The decode step decides (rule since session 17).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
# Correctness first: forced configs incl. the stream-K tiles (ragged M, 1-16 shares per tile,
# SM budgets), then the dispatched path on the gpu suite.
SUITE_TIMEOUT=240 run_suites "gpu_reliability" gpu 2>&1 | tail -8
SH="1,10240,5120 9,10240,5120 12,10240,5120 16,10240,5120 16,51200,5120 12,51200,5120 16,5120,8192 16,5120,25600 24,10240,5120 32,10240,5120 24,51200,5120 32,51200,5120 32,5120,25600"
bench_ab 2 old@bench_old= new= -- --shapes $SH --columns ours,into --samples 15 --no-check --json "$R/{VARIANT}.json"
pack_out s34ab
mkdir -p $R  # pack_out removed it
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old X=new" "16 32 1" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s34dec
