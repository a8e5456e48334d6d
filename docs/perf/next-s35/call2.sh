#!/bin/bash
# Prepared in session 34 (not run): the same-run table (anchors.py's torch cuBLASLt / Triton, then
# our bench, one machine) on the kept stream-K rule. Carry bundle/dev with bench (HEAD) and
# anchors.py (../shared/peers/anchors.py). ~430 s. Predictions: gate_up 32 "into" ~69 us hot
# (0.87 of session 33's peer 79.0: met unless the peer runs faster), gate_up 16 ~63.5 (needs
# <= 0.9 x Triton: 62.9 at session 33's 69.9: likely still a miss); every other row as in
# session 33 (31 of 53) within the run-to-run spread.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s35table
