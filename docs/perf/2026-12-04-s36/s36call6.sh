#!/bin/bash
# Session 36 call 6: the same-run table (anchors.py's torch cuBLASLt / Triton, then bench, one
# machine) on the session's code: the stream-K publish off the math path and q|k|v at 9-16
# tokens on stream-K. Then the gpu suite on the new dispatch. bundle/dev: bench, gpu, anchors.py.
# Predictions: q|k|v 16 "into" 16.1-16.2 hot (target <= 0.9 x best peer: ~16.1 at session 35's
# 17.87, on the edge), cold ~17.1; every other row as in session 35 within the spread.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s36table
mkdir -p $R
SUITE_TIMEOUT=110 run_suites gpu
