#!/bin/bash
# Session 12, call 2: launch-ahead with the readback fixed (own events: the pinned slices'
# events are never recorded under candle, call 1's finish() returned early). GPU tests
# qwen3_gpu + gpu_sampling; decode b1 / b16, launch-ahead off / on, x3 interleaved; bench
# --sweep of every compiled config on the q|k|v shapes (op path).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in qwen3_gpu gpu_sampling; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt)"
done
echo "tests done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LAUNCH_AHEAD=0 CANDLE_FP8_LAUNCH_AHEAD=1" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
timeout 150 $BIN/bench --sweep --json $R/sweep.json --shapes 1,10240,5120 16,10240,5120 > $R/sweep.log 2>&1; echo "sweep rc=$?"
grep -E "SWEEP (1|16) 10240 5120 kind=2 (8|16)x64|SWEEP-BEST" $R/sweep.log
echo "all done at $(( $(date +%s) - T0 )) s"
grep -h "^TTFT\|^TPOT\|^host enq\|^id readback" $R/dec/sweep-CANDLE_FP8_LAUNCH_AHEAD_1-b1-r1.log $R/dec/sweep-CANDLE_FP8_LAUNCH_AHEAD_1-b16-r1.log
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s12call2.tgz r && rm -rf r && echo packed
