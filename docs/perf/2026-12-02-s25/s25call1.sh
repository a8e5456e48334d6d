#!/bin/bash
# Prepared in session 24 (not run: no device time left). The same-run table session 24 could not
# make (its bench ran without anchors.py) and the decode loop with the split tail in the prefill
# (o and down at M = 100 now run the persistent 128x128 tile with a 3-way split tail).
# Pack here (bundle route):
#   bash /work/build.sh   # or: CARGO_TARGET_DIR=/work/target-cuda bash scripts/bundle.sh
#   rm -f bundle/dev/*.xz && CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode &&
#   cp ../shared/peers/anchors.py bundle/dev/
# Run: bash docs/perf/2026-12-02-s25/s25call1.sh (prepared in session 24 as docs/perf/next-s25/table-and-decode.sh) (carry bundle/dev); ~8.5 device minutes.
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 timeout 200 bash scripts/dev/decode_sweep.sh "X=default" "1 16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/decode.txt
timeout 300 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
BENCH_STAMPS=1 timeout 200 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2>&1
echo "bench rc=$? at $(elapsed)"
python3 scripts/perf_table.py $R/bench.json $R/anchors.log > $R/final-table.md 2>&1
tail -1 $R/final-table.md
pack_out s25call1
