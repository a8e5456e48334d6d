#!/bin/bash
# Session 15, call 5: the bench table on the final code (ours, cuBLASLt, candle bf16 in one run;
# power-settled, --settle-ms 250), right after call 4's anchors on the same machine.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/bench.xz > bundle/bin/bench; chmod +x bundle/bin/bench
nvidia-smi --query-gpu=name,serial,clocks.sm,temperature.gpu --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
BENCH_STAMPS=1 timeout 560 bundle/bin/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2> $R/bench.stamps; echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
kill $SMI
cd $OUT && tar czf s15call5.tgz r && rm -rf r && echo packed
