#!/bin/bash
# Prepared in session 19 on branch s20-fast-quant (NOT RUN, no device time left): every activation
# quantizer (fp8gemm_quantize_act, the fused add+RMSNorm+quantize and SiLU·up+quantize kernels,
# the attention kernel's quantized output, the SwiGLU GEMM epilogue, the in-kernel GEMM
# quantizer) takes its e4m3 codes from quantize_e4m3x2 (act_quant.cuh): v * rcp.approx(s) with an
# interval check, IEEE division only at rounding midpoints — bit-identical by the argument in
# act_quant.cuh and the CPU test format::tests::fast_quotient_codes_equal_the_divided_ones.
#
# Build and pack (here):
#   git checkout s20-fast-quant && bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh decode gpu gpu_fused gpu_attention \
#     qwen3_gpu gpu_reliability bench &&
#   git checkout main && bash /work/build.sh && CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh decode=main &&
#   cp docs/perf/next-s20/s20call1.sh bundle/dev/   (from the branch: git show s20-fast-quant:docs/perf/next-s20/s20call1.sh)
# Run: bash bundle/dev/s20call1.sh with carry ["bundle/dev"] (~8 min).
# Land the branch only if every suite passes (bit-equality of the fused kernels and the quantizer
# vs the CPU contract) and decode b1 is not slower.
source scripts/dev/call_prelude.sh
SUITE_TIMEOUT=250 run_suites gpu gpu_fused gpu_attention qwen3_gpu
timeout 120 $BIN/gpu_reliability --test-threads=1 forced_splits > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
CANDLE_FP8_TEST_PROVIDERS=hopper timeout 150 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
  $BIN/gpu_fused --test-threads=1 > $R/san-memcheck-fused.txt 2>&1
echo "memcheck gpu_fused rc=$? $(grep -h 'ERROR SUMMARY' $R/san-memcheck-fused.txt) at $(elapsed)"
# Decode TPOT, new (this branch) vs main, interleaved, three rounds, b1 and b16.
OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_main" "1 16" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
# The full linear at M = 1 / 8 (standalone quantizer + GEMM) and the in-kernel variant.
SH="1,4096,4096 8,4096,4096 1,5120,8192 1,51200,5120"
for q in 0 1; do
  CANDLE_FP8_QUANT_IN=$q timeout 120 $BIN/bench --shapes $SH --columns ours,into,full --samples 15 > $R/bench-q$q.txt 2>&1
  echo "bench quant_in=$q rc=$? at $(elapsed)"; grep "full" $R/bench-q$q.txt | head -8
done
pack_out s20call1
