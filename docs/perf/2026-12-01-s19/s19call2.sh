#!/bin/bash
# Session 19, call 2: the peers half of the whole GEMM table (anchors.py: torch cuBLASLt,
# Triton), then call 3 (s19call3.sh) on the same machine. Merge: python3 scripts/perf_table.py
# bench.json anchors.log.
source scripts/dev/call_prelude.sh
timeout 420 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
tail -3 $R/anchors.log
pack_out anchors
