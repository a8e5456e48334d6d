#!/bin/bash
# Session 25, call 5 (bundle route): the M > 256 split-tail rule (856603b) on shapes it changes
# that calls 3-4 did not measure (predicted gains 11-17 %; expect 3-10 % from calls 3-4's
# ratio of measured to predicted). bench (856603b) vs bench_old (39972e4), two interleaved rounds,
# "into" / op, with the accuracy check. Same bundle as call 4.
source scripts/dev/call_prelude.sh
SH="1792,5120,8192 2304,4096,4096 2560,10240,5120 896,10240,5120 1280,10240,5120 1600,4096,4096 3584,5120,25600 5120,5120,8192 448,51200,5120"
bench_ab 2 new= old@bench_old= -- --shapes $SH --columns ours,into --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-tail2.txt
python3 -c "
import json
for r in json.load(open('$R/new-r1.json'))['rows']:
    if r['temp'] == 'hot': print('relerr', r['m'], r['n'], r['k'], r.get('relerr'))"
pack_out s25call5
