#!/bin/bash
# Session 14, call 2: the weight layout vs the HBM rate of the decode GEMMs' copy pattern
# (scripts/dev/layout_bench.cu, built here: row-major 64-row boxes vs 8 KB contiguous blocks).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
chmod +x bundle/dev/layout_bench
timeout 300 bundle/dev/layout_bench | tee $R/layout.txt
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s14call2.tgz r && rm -rf r
