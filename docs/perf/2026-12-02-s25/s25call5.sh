#!/bin/bash
# Session 25, call 5 (bundle route): the M > 256 split-tail rule (856603b) on shapes it changes
# that calls 3-4 did not measure (predicted gains 11-17 %; expect 3-10 % from calls 3-4's
# ratio of measured to predicted). bench (856603b) vs bench_old (39972e4), two interleaved rounds,
# "into" / op, with the accuracy check. Same bundle as call 4.
# Then (harness route, kernels built here from the tree): gate_up (N = 51200) at M = 65-256, where
# today's configs run 400 tiles of 128x128 (warp-specialized, 3.03 waves) or the persistent tiles
# with a partial last round: the persistent 128x128 / 256x128 tiles with a 4-way split tail, op path.
# Model: 4 waves -> 3.25 rounds at M <= 128 (-19 %), -14 % for 256x128 k4 at 192-256.
source scripts/dev/call_prelude.sh
SH="1792,5120,8192 2304,4096,4096 2560,10240,5120 896,10240,5120 1280,10240,5120 1600,4096,4096 3584,5120,25600 5120,5120,8192 448,51200,5120"
bench_ab 2 new= old@bench_old= -- --shapes $SH --columns ours,into --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-tail2.txt
python3 -c "
import json
for r in json.load(open('$R/new-r1.json'))['rows']:
    if r['temp'] == 'hot': print('relerr', r['m'], r['n'], r['k'], r.get('relerr'))"
source scripts/dev/harness_prelude.sh  # (its build logs land in $OUT)
SW="timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full"
for r in 1 2; do
  $SW --only auto,persistent128x128s5k4 --shapes 80,51200,5120 100,51200,5120 128,51200,5120 > $R/sweep-lo-r$r.txt 2>&1
  $SW --only auto,persistent128x128s5k4,persistent256x128s3k4 --shapes 160,51200,5120 192,51200,5120 256,51200,5120 > $R/sweep-hi-r$r.txt 2>&1
  echo "sweep round $r at $(elapsed)"
done
grep -h "WRONG\|Error\|Traceback" $R/sweep-*.txt | head -3
grep -h "^SWEEP [0-9]" $R/sweep-*.txt | awk '{printf "%s %s %s %-26s %8s %8s\n", $2, $3, $4, $5, $6, $7}' | sort -n -s -k1,1
pack_out s25call5
