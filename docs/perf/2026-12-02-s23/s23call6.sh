#!/bin/bash
# Session 23, call 6: the whole GEMM table with bench.rs timing the peers' operands (randn
# quantized per group, as anchors.py does; kernels as main): anchors.py (torch cuBLASLt, Triton)
# then bench, back to back on one machine, merged by scripts/perf_table.py.
# Pack here: rm -f bundle/dev/* && CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench &&
#   cp ../shared/peers/anchors.py bundle/dev/
source scripts/dev/call_prelude.sh
timeout 300 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
BENCH_STAMPS=1 timeout 200 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2>&1
echo "bench rc=$? at $(elapsed)"
python3 scripts/perf_table.py $R/bench.json $R/anchors.log > $R/final-table.md 2>&1
grep -c "✓\|met" $R/final-table.md
pack_out s23call6
