#!/bin/bash
# Prepared in session 18, for the next session: our half of the whole GEMM table (ours into /
# op, our cuBLASLt provider, candle bf16; power-settled) right after next-table-anchors.sh on the
# same machine, with the full linear at M = 1 — in-kernel quantization as the default if
# s18call1.sh validated it (else drop CANDLE_FP8_QUANT_IN=1).
source scripts/dev/call_prelude.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.sw_power_cap --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
CANDLE_FP8_QUANT_IN=1 BENCH_STAMPS=1 timeout 560 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2> $R/bench.stamps
echo "bench rc=$? at $(elapsed)"
kill $SMI
pack_out bench
