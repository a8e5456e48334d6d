#!/bin/bash
# Session 13, call 1 (head d4cb2d4 + bench stamps): (1) the merged argmax entry on the H200
# (gpu_sampling, qwen3_gpu); (2) decode b1 / b16 baseline; (3) large M: is "into" slower than
# "op" because of clocks? nvidia-smi clocks / power / throttle reasons every 50 ms next to the
# bench's wall-clock stamps, 4096³ twice in one process; (4) bench --sweep of the near-miss
# Qwen3 rows (M = 8-128), through the users' path.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu_sampling qwen3_gpu; do
  timeout 150 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP" $R/test-*.txt | head -3
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LAUNCH_AHEAD=1" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown --format=csv -lms 50 > $R/smi.csv 2>&1 &
SMI=$!
sleep 1
BENCH_STAMPS=1 timeout 120 $BIN/bench --no-check --shapes 4096,4096,4096 4096,4096,4096 2048,4096,4096 > $R/bench-large.log 2> $R/bench-large.stamps; echo "bench large rc=$? at $(( $(date +%s) - T0 )) s"
sleep 1; kill $SMI
grep "m=" $R/bench-large.log
timeout 230 $BIN/bench --sweep --shapes 16,51200,5120 32,51200,5120 16,5120,25600 32,5120,25600 64,5120,25600 128,5120,25600 128,5120,8192 8,10240,5120 16,10240,5120 32,10240,5120 > $R/sweep.log 2>&1; echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep "SWEEP-BEST" $R/sweep.log
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s13call1.tgz r && rm -rf r && echo packed
