#!/bin/bash
# Session 13, call 9 (final build: the split norm at one row only, FP8GEMM_NORM_SPLIT_MAX_ROWS 1): the fused norm split over 8 CTAs (kernels/fused_quant.cu
# add_rmsnorm_quant_split_kernel, a global-memory barrier lent by the caller). Bit-exactness
# first (gpu_fused: fused vs composed at m = 1, 3, 16, 17, 129 x k = 128, 5120, 25600 and the
# split-K partials; gpu_attention shares the zeroed counters; qwen3_gpu), memcheck of the two
# norm tests, then decode b1 / b16 with CANDLE_FP8_NORM_SPLIT=1 vs 0 interleaved x3.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu_fused gpu_attention qwen3_gpu; do
  timeout 150 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/gpu_fused --test-threads=1 add_rmsnorm_quantize_is_bit_exact split_k_partials > $R/memcheck.txt 2>&1; echo "memcheck rc=$? $(grep -c 'ERROR SUMMARY: 0' $R/memcheck.txt) clean summaries at $(( $(date +%s) - T0 )) s"
grep "ERROR SUMMARY\|test result" $R/memcheck.txt | head -4
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_NORM_SPLIT=1 CANDLE_FP8_NORM_SPLIT=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s13call9.tgz r && rm -rf r && echo packed
