#!/bin/bash
# Session 15 call 3 (candidate final code): GPU suites, memcheck of the gated SwiGLU test
# (evict-first path), decode b1 / b8 / b16 default (weights evict-first) vs
# CANDLE_FP8_WEIGHT_EVICT_FIRST=0 x3 interleaved, the bf16 baseline b1 / b16, accuracy mode.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu gpu_fused qwen3_gpu gpu_sampling gpu_attention; do
  timeout 240 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
CANDLE_FP8_GPU_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/gpu_fused --test-threads=1 gate_up_gemm_with_swiglu_epilogue > $R/memcheck.txt 2>&1; echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep "ERROR SUMMARY\|test result" $R/memcheck.txt | head -3
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=1 CANDLE_FP8_WEIGHT_EVICT_FIRST=0" "1 8 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
for b in 1 16; do
  timeout 200 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --max-new-tokens 48 --ignore-eos --batch $b --linear bf16 > $R/bf16-b$b.log 2>&1
  echo "bf16 b$b rc=$? $(grep -E '^TPOT' $R/bf16-b$b.log)"
done
grep -h "peak\|TTFT" $R/dec/sweep-X_1-b1-r1.log $R/dec/sweep-X_1-b16-r1.log | head -8
timeout 60 $BIN/decode --device cuda --check-accuracy 256 --max-new-tokens 8 > $R/acc-tiny.log 2>&1; echo "acc tiny rc=$?"
timeout 150 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --check-accuracy 32 --max-new-tokens 8 > $R/acc-32b.log 2>&1; echo "acc 32b rc=$?"
grep -h "top-1 agreement" $R/acc-*.log
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s15call3.tgz r && rm -rf r && echo packed
