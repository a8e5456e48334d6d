#!/bin/bash
# Session 13, call 12 (review refactor: shared load_h8 / warp_sum_xor / rms_of / zero_scale_padding
# helpers in the norm, SwiGLU and quantize kernels; no intended change of bits): the bit-exact
# suites (gpu_fused, qwen3_gpu, gpu's activation quantization and quantize-then-GEMM tests), then
# decode b1 / b16 once.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
timeout 90 $BIN/gpu_fused --test-threads=1 > $R/test-gpu_fused.txt 2>&1; echo "gpu_fused rc=$? $(grep '^test result' $R/test-gpu_fused.txt)"
timeout 60 $BIN/qwen3_gpu --test-threads=1 > $R/test-qwen3_gpu.txt 2>&1; echo "qwen3_gpu rc=$? $(grep '^test result' $R/test-qwen3_gpu.txt)"
timeout 60 $BIN/gpu --test-threads=1 activation_quantization quantize_then_gemm > $R/test-gpu.txt 2>&1; echo "gpu rc=$? $(grep '^test result' $R/test-gpu.txt)"
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
OUT=$R/dec REPEAT=1 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_NORM_SPLIT=1" "1 16" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt; echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s13call12.tgz r && rm -rf r
