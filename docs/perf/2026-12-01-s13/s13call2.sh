#!/bin/bash
# Session 13, call 2: (1) bench --sweep for dispatch rules: swap-AB 32x64 at M = 17-32 on wide N,
# split 2 (2-CTA push sum) vs 3 (workspace) at M = 33-64 with few column tiles; (2) the large-M
# rows with the new power settle (--settle-ms 250 default), stamps + nvidia-smi; (3) the new
# criterion bench (benches/gpu_gemm.rs).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
timeout 240 $BIN/bench --sweep --settle-ms 0 --shapes 24,51200,5120 32,51200,5120 32,25600,5120 32,16384,4096 24,10240,5120 32,28672,8192 40,5120,25600 48,5120,25600 64,5120,25600 64,5120,8192 64,4096,16384 48,4096,14336 > $R/sweep.log 2>&1; echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep "SWEEP-BEST" $R/sweep.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap --format=csv -lms 50 > $R/smi.csv 2>&1 &
SMI=$!
BENCH_STAMPS=1 timeout 150 $BIN/bench --no-check --shapes 4096,4096,4096 2048,4096,4096 8192,4096,4096 > $R/bench-large.log 2> $R/bench-large.stamps; echo "bench large rc=$? at $(( $(date +%s) - T0 )) s"
kill $SMI
grep "m=" $R/bench-large.log
timeout 150 $BIN/gpu_gemm --bench > $R/criterion.log 2>&1; echo "criterion rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^gpu_gemm|time:|thrpt:|SKIP" $R/criterion.log | head -60
cd $OUT && tar czf s13call2.tgz r && rm -rf r && echo packed
