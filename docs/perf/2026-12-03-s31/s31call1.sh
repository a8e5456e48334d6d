#!/bin/bash
# Session 31 call 1 (bundle route, bundle/dev carried: bench + decode at 09dba4f): session 30's
# prepared same-run-table.sh — anchors.py (torch's cuBLASLt, Triton), then bench (ours into / op,
# our cuBLASLt provider, candle bf16) on one machine, merged by scripts/perf_table.py. The first
# table on the code with the small-M tiles' overlapped promotion dispatched (21112af).
source scripts/dev/call_prelude.sh
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s31call1
