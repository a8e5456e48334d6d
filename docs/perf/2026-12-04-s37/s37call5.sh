#!/bin/bash
# Session 37 call 5: the Speed issue's same-run table on HEAD (anchors.py then bench).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s37table
