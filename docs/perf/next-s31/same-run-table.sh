#!/bin/bash
# Prepared in session 30 as its call 4 (not run: the device time ran out). Bundle route: the whole
# table with the peers in the same run on the code with the small-M tiles' overlapped promotion
# dispatched (rows at M = 33-256 on 64x64 / 64x128 small-M tiles change). anchors.py (torch's
# cuBLASLt and Triton), then bench (ours into / op, our cuBLASLt provider, candle bf16), merged by
# scripts/perf_table.py (~8 device minutes).
source scripts/dev/call_prelude.sh
same_run_table
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
pack_out s31table
