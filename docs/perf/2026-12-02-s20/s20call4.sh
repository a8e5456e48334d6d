#!/bin/bash
# Session 20, call 4: the peers half of the whole GEMM table (anchors.py: torch cuBLASLt, Triton).
source scripts/dev/call_prelude.sh
timeout 420 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
pack_out s20call4
