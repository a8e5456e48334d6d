#!/bin/bash
# Session 26, call 4 (bundle route): the whole table with the peers in the same run on the final
# code (3cf683b: session 25's split tails for gate_up at M = 65-256 and session 26's swap-AB
# 32-token tiles at M = 17-32 change the rows gate_up 128 and q|k|v 32). anchors.py (torch's
# cuBLASLt and Triton), then bench (ours into / op, our cuBLASLt provider, candle bf16), merged by
# scripts/perf_table.py. Decode was measured in call 1 (its GEMMs are unchanged since).
source scripts/dev/call_prelude.sh
same_run_table  # (as run: the same commands written out; call_prelude.sh has them since)
pack_out s26call4
