#!/bin/bash
# Session 23, call 1 (repo root, bundle/dev carried; working tree = HEAD + the persistent 256x128
# N-half units patch, docs/perf/2026-12-02-s23/persistent-256-halves.patch, dev key stages 103).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu_reliability
# 1. Harness (kernels built on the device): torch check of every config, sweep auto / 256x128 s3 /
#    s103 / 128x128 s5 on the large-M shapes (bitwise s103 vs s3), per-stage probe s3 vs s103.
#    Prediction: 896 -> 650-750 ns per K block if shared memory keeps up; power cap (~690 W,
#    ~1500 MHz at large M, session 21) may take part of it.
# 2. gpu_reliability dev_variants (CPU reference, now with persistent 256x128 s3 vs s103).
# 3. bench ours / into / cuBLASLt, dispatched vs --dev-variant, two interleaved rounds.
# 4. bench --sweep of the q|k|v / o decode shapes after session 22's 128-byte L2 promotion.
source scripts/dev/harness_prelude.sh
$H --lib /tmp/lib_plain.so check --shapes 300,144,384 1000,1024,5120 2048,4096,4096 513,5120,8192 > $O/check.txt 2>&1
tail -2 $O/check.txt
$H --lib /tmp/lib_plain.so sweep --no-full --only auto,persistent256x128s3,persistent256x128s103,persistent128x128s5 \
  --shapes 1024,4096,4096 2048,4096,4096 4096,4096,4096 8192,4096,4096 2048,10240,5120 2048,51200,5120 > $O/sweep.txt 2>&1
wait $BPID
$H --lib /tmp/lib_stages.so stages --only persistent256x128s3,persistent256x128s103 --shapes 2048,4096,4096 > $O/stages.txt 2>&1
echo "harness done $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL" $O/*.txt | head
grep BITWISE $O/sweep.txt | awk '{print $NF}' | sort | uniq -c
grep -A1 STAGES $O/stages.txt | cut -c1-220
grep "^SWEEP [0-9]" $O/sweep.txt

source scripts/dev/call_prelude.sh
timeout 200 "$BIN/gpu_reliability" dev_variants --test-threads=1 > "$R/test-dev.txt" 2>&1
echo "dev_variants rc=$? $(grep '^test result' $R/test-dev.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-dev.txt" | head -5
SH="1024,4096,4096 2048,4096,4096 4096,4096,4096 2048,5120,8192 2048,10240,5120"
bench_ab 2 base= half=--dev-variant -- --shapes $SH --columns ours,into,lt --samples 15
python3 scripts/dev/ab_table.py $R base half --columns ours/into/lt | tee $R/ab-table.txt
timeout 200 $BIN/bench --sweep --settle-ms 100 --samples 15 --no-check --shapes \
  1,10240,5120 8,10240,5120 16,10240,5120 1,5120,8192 8,5120,8192 16,5120,8192 > $R/sweep-decode.txt 2>&1
echo "decode sweep rc=$? at $(elapsed)"
grep "SWEEP-BEST" $R/sweep-decode.txt
pack_out s23call1
