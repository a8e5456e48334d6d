#!/bin/bash
# Session 29 call 1: is the ~200 ns per ring stage (session 10's ingest law) per SM or per ring?
# (1) ingest_bench table 3: 1, 2 or 3 CTAs per SM, each its own TMA ring; (2) the small-M tiles
# with shallow rings that let two or three CTAs share an SM (new development keys 64x32 s6,
# 64x64 s4, 64x128 s4 with 128 registers) against the dispatched configs at mid M.
# (Edited after it ran: the summaries are scripts/dev/summarize.py now; the one that ran
# choked on the sweep's header line.)
source scripts/dev/harness_prelude.sh
(cd scripts/dev && nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I ../../kernels/include ingest_bench.cu -o /tmp/ingest_bench) \
  && timeout 120 /tmp/ingest_bench 3 > $O/ingest3.txt 2>&1
echo "ingest rc=$? at $(( $(date +%s) - T0 )) s"
CF=auto,small_m64x64s8k2,small_m64x128s6k2,small_m64x64s4,small_m64x64s4k2,small_m64x64s4k3,small_m64x64s4k4,small_m64x128s4,small_m64x128s4k2,small_m64x32s6,small_m64x32s6k2,small_m64x32s6k4
timeout 300 $H --lib /tmp/lib_plain.so sweep --no-full --only $CF \
  --shapes 64,4096,4096 128,4096,4096 192,4096,4096 256,4096,4096 96,4096,4096 128,10240,5120 64,10240,5120 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "WRONG|Error|error" $O/sweep.txt | head
grep -v "^INGEST3" $O/ingest3.txt | head -5
python3 scripts/dev/summarize.py ingest3 $O/ingest3.txt
python3 scripts/dev/summarize.py sweep $O/sweep.txt
