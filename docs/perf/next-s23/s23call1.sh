#!/bin/bash
# Prepared in session 22 (not run): the persistent 256x128 tile with N-half units in flight
# (kSplitN: each wave's two 64-column halves are units, one promoted while the next runs; 192
# registers as now). Session 22's probe: 256x128 is consumer-bound at 896 ns per K block (each
# wave's promotion after its MMA, ~576 ns of MMA); m64n64 wgmma re-read the A tile, so shared-
# memory bandwidth (~120 of 128 B/clk) may cap it. Prediction: 896 -> 650-750 ns per K block if
# shared memory keeps up, i.e. 4096^3 from ~131 to ~110-120 us.
# Run from the repo root after `git apply docs/perf/next-s23/persistent-256-halves.patch`
# (compiles with 0 spills, 168 registers at launch bounds; checked here, not run):
#   bash docs/perf/next-s23/s23call1.sh
source scripts/dev/harness_prelude.sh
$H --lib /tmp/lib_plain.so check --shapes 300,144,384 1000,1024,5120 2048,4096,4096 513,5120,8192 > $O/check.txt 2>&1
tail -2 $O/check.txt
$H --lib /tmp/lib_plain.so sweep --no-full --only auto,persistent256x128s3,persistent256x128s103,persistent128x128s5 \
  --shapes 1024,4096,4096 2048,4096,4096 4096,4096,4096 8192,4096,4096 2048,10240,5120 2048,51200,5120 > $O/sweep.txt 2>&1
wait $BPID
$H --lib /tmp/lib_stages.so stages --only persistent256x128s3,persistent256x128s103 --shapes 2048,4096,4096 > $O/stages.txt 2>&1
echo "done $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL" $O/*.txt | head
grep BITWISE $O/sweep.txt | awk '{print $NF}' | sort | uniq -c
grep -A1 STAGES $O/stages.txt | cut -c1-220
grep "^SWEEP [0-9]" $O/sweep.txt
