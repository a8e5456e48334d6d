#!/bin/bash
# Session 29 call 3: (1) ingest_bench table 3 one row per process (call 2's run stopped at the
# row 8 KB x 4 stages x 2 CTAs/SM, hot, and never printed it): 1-3 CTAs per SM, each its own
# ring, and 3-D boxes of two K blocks; (2) where the 64 x 64 x 4-stage tile (two or three CTAs
# per SM) beats the dispatch at M = 33-64 (call 2: q|k|v 64 tokens 18.16 vs 20.93 us hot).
# (Edited after it ran: the summaries are scripts/dev/summarize.py now, same output.)
source scripts/dev/harness_prelude.sh
(cd scripts/dev && nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I ../../kernels/include ingest_bench.cu -o /tmp/ingest_bench)
for spec in "0 64 4 2" "0 64 8 2" "0 128 2 1" "0 128 2 2" "0 128 2 3" "0 128 4 1" "0 128 4 2" "0 128 4 3" "0 128 8 1" \
            "0 256 2 1" "0 256 2 2" "0 256 2 3" "0 256 4 1" "0 256 4 2" "0 256 6 1" \
            "1 256 2 1" "1 256 4 1" "1 256 6 1" "1 512 2 1" "1 512 3 1"; do
  timeout 10 /tmp/ingest_bench 3 $spec > $O/ing1.txt 2>&1 || echo "INGEST3 row [$spec] rc=$? $(tail -1 $O/ing1.txt)"
  grep "^INGEST3 [23]d" $O/ing1.txt >> $O/ingest3.txt
done
echo "ingest at $(( $(date +%s) - T0 )) s"
S=""
for m in 40 48 64; do for nk in 4096,4096 5120,8192 5120,25600 8192,4096 10240,5120 14336,4096 25600,5120 51200,5120; do S="$S $m,$nk"; done; done
timeout 400 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,small_m64x64s4,small_m64x64s4k2,small_m64x64s6k2,small_m64x64s4k3 \
  --shapes $S > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "WRONG|Error|error" $O/sweep.txt | head
python3 scripts/dev/summarize.py ingest3 $O/ingest3.txt
python3 scripts/dev/summarize.py sweep $O/sweep.txt
