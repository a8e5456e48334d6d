#!/bin/bash
# Session 13, call 4 (right after call 3, same machine): our bench over the default shapes
# (power-settled timings, --settle-ms 250), stamps and clocks logged; the table is merged with
# call 3's anchors.log here (scripts/perf_table.py).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/bench.xz > bundle/bin/bench; chmod +x bundle/bin/bench
nvidia-smi --query-gpu=name,serial,clocks.sm,temperature.gpu --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
BENCH_STAMPS=1 timeout 560 bundle/bin/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2> $R/bench.stamps; echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
kill $SMI
tail -60 $R/bench.log | head -5
cd $OUT && tar czf s13call4.tgz r && rm -rf r && echo packed
