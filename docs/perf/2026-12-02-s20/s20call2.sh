#!/bin/bash
# Session 20, call 2: how exact is each provider's bf16 output (gemm_error: share of outputs off
# the correctly rounded value, bias and rms in ulps vs an f64 host reference), and does promoting
# after every k32 wgmma (build "p": CANDLE_FP8_NVCC_FLAGS=-DFP8GEMM_PROMOTE_K32=1) instead of
# every 128-K block change it, the decode accuracy mode and the GEMM time.
source scripts/dev/call_prelude.sh
for v in main p; do
  timeout 150 $BIN/gemm_error_$v > $R/err-$v.txt 2>&1; echo "gemm_error $v rc=$? at $(elapsed)"
done
for v in main p; do
  timeout 90 $BIN/decode_$v --device cuda --check-accuracy 256 --max-new-tokens 8 > $R/acc-tiny-$v.log 2>&1
  echo "acc tiny $v rc=$? at $(elapsed)"
done
for v in main p; do
  timeout 200 $BIN/decode_$v --device cuda --random-weights qwen3-32b --prompt-len 100 --check-accuracy 64 \
    --max-new-tokens 8 > $R/acc-32b-$v.log 2>&1
  echo "acc 32b $v rc=$? at $(elapsed)"
done
SH="1,5120,25600 1,10240,5120 16,10240,5120 128,4096,4096 512,4096,4096 2048,4096,4096"
for v in main p; do
  timeout 150 $BIN/bench_$v --shapes $SH --columns ours,into --samples 10 > $R/bench-$v.txt 2>&1
  echo "bench $v rc=$? at $(elapsed)"
done
pack_out s20call2
tar xzf $OUT/s20call2.tgz -C /tmp && for v in main p; do
  echo "== $v"; grep -v "^device" /tmp/r/err-$v.txt
  grep -h "top-1 agreement" /tmp/r/acc-tiny-$v.log /tmp/r/acc-32b-$v.log
  grep -h " hot " /tmp/r/bench-$v.txt
done
