#!/bin/bash
# Prepared in session 31 (not run). Bundle route, ~4 device minutes. Build here at HEAD:
#   bash /tmp/build_ex.sh-style release build of bench + decode (--features cuda, the patched
#   candle-core; docs/CUDA.md), the GPU test binaries (`--test gpu --test gpu_reliability
#   --no-run --message-format=json > target/cuda/gpu-test-build.json`), then
#   `CARGO_TARGET_DIR=target/cuda bash scripts/dev/pack.sh bench decode gpu gpu_reliability`;
#   a traced bench: CANDLE_FP8_NVCC_FLAGS=-DFP8GEMM_TRACE CARGO_TARGET_DIR=target/cuda-trace
#   (same build; a separate target folder so the normal build is not rebuilt), packed with
#   `CARGO_TARGET_DIR=target/cuda-trace bash scripts/dev/pack.sh bench=trace`. Carry bundle/dev.
# 1. The full gpu suite on 65bc4e0's kernels (session 31 ran only its quick grid).
# 2. Why "into" (back-to-back launches into one output) is 1-2 us slower than the op at q|k|v
#    16-64 tokens: per-CTA timelines of 24 chained launches, "into" and "ours" (the op), with the
#    SMs each launch's CTAs land on and how many entered before the previous launch ended
#    (scripts/dev/trace_timeline.py --chain).
source scripts/dev/call_prelude.sh
run_suites gpu gpu_reliability
for m in 16 32 64; do
  for col in into ours; do
    timeout 60 "$BIN/bench_trace" --shapes $m,10240,5120 --columns $col --samples 3 --no-check \
      --trace-out $R/qkv$m-$col.trace > $R/bench-qkv$m-$col.txt 2>&1
    echo "== q|k|v $m tokens, $col (rc=$?)"
    python3 scripts/dev/trace_timeline.py $R/qkv$m-$col.trace --chain 24 --ctas $R/qkv$m-$col.csv | tail -12
  done
done
xz -T0 $R/*.trace
pack_out s32qkvchain
