#!/bin/bash
# Session 19, call 3: our half of the whole GEMM table (ours into / op, our cuBLASLt provider,
# candle bf16; power-settled), right after call 2 (anchors.py) on the same machine, with the
# full linear at M = 1 (quantizer launch + GEMM: the in-kernel quantization stays off, call 1).
source scripts/dev/call_prelude.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
BENCH_STAMPS=1 timeout 560 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2> $R/bench.stamps
echo "bench rc=$? at $(elapsed)"
kill $SMI
pack_out bench
