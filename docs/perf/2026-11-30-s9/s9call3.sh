#!/bin/bash
# Session 9, call 3: bench (ours op + ours into) + anchors, same call.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
SH="1,4096,4096 16,4096,4096 32,4096,4096 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 256,4096,4096 512,4096,4096 2048,4096,4096 1,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600"
PACK=0 OUT=$R BENCH_TIMEOUT=300 ANCHORS_TIMEOUT=200 BENCH_ARGS="--shapes $SH" ANCHORS_ARGS="--no-ceilings --shapes $SH" bash bundle/gpu_run.sh bench anchors > $R/bench-phase.txt 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s"
python3 scripts/perf_table.py $R/bench.json $R/anchors.log > $R/table.txt 2>&1
cat $R/summary.txt
cat $R/table.txt | cut -c1-400 | tail -18
cd $OUT && tar czf s9c3.tgz r && rm -rf r && echo packed
