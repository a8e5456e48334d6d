#!/bin/bash
# Session 26, call 1 (bundle route, then harness route). Part A = docs/perf/next-s26/
# verify-gate-up-tails.sh: commit 79627df's split tails for gate_up (N = 51200) at M = 65-256
# through the bench's "into" (bench at 8c330cf vs bench_old at 39972e4, two interleaved rounds)
# and the decode loop (prefill gate_up at M = 100). Predicted from session 25's harness sweep:
# 80-128 tokens -5..-20 %, 160 -17..-22 %, 192 -10 %, 256 -5..-7 %; TTFT b1 -0.6..-1.4 ms.
# Part B = docs/perf/next-s26/midm-fill.sh, one round (q|k|v at M = 16-128 over every compiled
# config; gate_up 48/64 with the persistent 128x128 split tail), if time is left.
source scripts/dev/call_prelude.sh
AB_COLUMNS=ours/into/lt bench_ab 2 new= old@bench_old= -- --shapes 80,51200,5120 100,51200,5120 128,51200,5120 160,51200,5120 192,51200,5120 256,51200,5120 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-gate-up.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=16 timeout 200 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "1 16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/decode.txt
pack_out s26call1a
left=$(( 540 - $(date +%s) + T0 ))
echo "left for part B: $left s"
if (( left > 120 )); then
  source scripts/dev/harness_prelude.sh
  kill $BPID 2>/dev/null
  t=$(( (left - 30) / 2 ))
  timeout $t $H --lib /tmp/lib_plain.so sweep --no-full --shapes 16,10240,5120 32,10240,5120 64,10240,5120 96,10240,5120 128,10240,5120 > $O/sweep-qkv.txt 2>&1
  echo "qkv sweep rc=$? at $(( $(date +%s) - T0 )) s"
  timeout $t $H --lib /tmp/lib_plain.so sweep --no-full --only auto,persistent128x128s5k4,small_m64x128s6k2,swap_ab32x64s8 --shapes 48,51200,5120 64,51200,5120 > $O/sweep-gu.txt 2>&1
  echo "gu sweep rc=$? at $(( $(date +%s) - T0 )) s"
  grep -h -E "WRONG|Error|Traceback" $O/sweep-*.txt | head -5
  for f in $O/sweep-*.txt; do grep -h "^SWEEP [0-9]" $f | awk -v f=$(basename $f .txt) '{printf "%-10s %s %s %s %-26s %8s %8s\n", f, $2, $3, $4, $5, $6, $7}'; done | sort -k2,2n -k5,5 -s
fi
