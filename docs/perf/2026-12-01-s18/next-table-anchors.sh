#!/bin/bash
# Prepared in session 18 (no device then), for the next session: the peers' half of the whole
# GEMM table (#5's "one run with the peers"; last done in session 15). anchors.py (torch
# cuBLASLt, Triton; shared/peers, copied to bundle/dev) then, in the next call on the same
# machine (check the serial), next-table-bench.sh. Merge: python3 scripts/perf_table.py
# bench.json anchors.log.
source scripts/dev/call_prelude.sh
timeout 420 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
tail -3 $R/anchors.log
pack_out anchors
