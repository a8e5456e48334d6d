#!/bin/bash
# Session 32, call 3 (run as one command line on call 2's warm machine): the gpu and
# gpu_reliability suites whole, logs in $R, packed.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
SUITE_TIMEOUT=280 run_suites gpu gpu_reliability >> $OUT/log.txt 2>&1
pack_out s32suites >> $OUT/log.txt 2>&1
cat $OUT/log.txt
