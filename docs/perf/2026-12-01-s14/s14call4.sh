#!/bin/bash
# Session 14, call 4: the gated gate/up GEMM with a whole 128-feature group per CTA (256 weight
# rows, 3 stages, no cluster launch): SiLU.up + quantization in its epilogue, no SwiGLU launch.
# Bit-exactness (gpu_fused: every variant vs GEMM + swiglu_quantize; qwen3_gpu), memcheck of the
# gated test, then decode b1 / b16: separate SwiGLU kernel (default) vs epilogue 128 rows
# (2-CTA clusters, session 6) vs epilogue 256 rows, interleaved x3.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
printf '#!/bin/bash\nCANDLE_FP8_SWIGLU_EPILOGUE=1 CANDLE_FP8_SWIGLU_TILE=256 exec %s/decode "$@"\n' $BIN > $BIN/decode_ep256; chmod +x $BIN/decode_ep256
for t in gpu_fused qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
CANDLE_FP8_GPU_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/gpu_fused --test-threads=1 gate_up_gemm_with_swiglu_epilogue > $R/memcheck.txt 2>&1; echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep "ERROR SUMMARY\|test result" $R/memcheck.txt | head -3
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=1 CANDLE_FP8_SWIGLU_EPILOGUE=1 DECODE_BIN=$BIN/decode_ep256" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s14call4.tgz r && rm -rf r && echo packed
