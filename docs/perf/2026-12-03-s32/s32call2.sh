#!/bin/bash
# Session 32, call 2 (prepared in session 31 as next-s32/same-run-table.sh). Bundle route (bench at 65bc4e0, anchors.py): the
# same-run table after 65bc4e0 (the small-M 64x128 tile on 8 stages at split 1-2). ~8 device
# minutes: anchors.py, then bench, merged by scripts/perf_table.py.
source scripts/dev/call_prelude.sh
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s32table
