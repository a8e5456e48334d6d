#!/bin/bash
# Session 14, call 5: the 64-row gated gate/up tile (32 features per CTA, the plain decode
# tile's footprint: 8 stages, three CTAs per SM) without a cluster: each 128-feature group's 4
# CTAs merge through a global workspace, the last one to finish quantizing the group (the
# attention's tail-merge pattern). Bit-exactness + memcheck of the gated test, then decode
# b1 / b8 / b16: separate SwiGLU kernel (default) vs epilogue 64 rows (merge) vs 256 rows.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in 64 256; do printf '#!/bin/bash\nCANDLE_FP8_SWIGLU_EPILOGUE=1 CANDLE_FP8_SWIGLU_TILE=%s exec %s/decode "$@"\n' $t $BIN > $BIN/decode_ep$t; chmod +x $BIN/decode_ep$t; done
for t in gpu_fused qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
CANDLE_FP8_GPU_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/gpu_fused --test-threads=1 gate_up_gemm_with_swiglu_epilogue > $R/memcheck.txt 2>&1; echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep "ERROR SUMMARY\|test result" $R/memcheck.txt | head -3
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=1 DECODE_BIN=$BIN/decode_ep64 DECODE_BIN=$BIN/decode_ep256" "1 8 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s14call5.tgz r && rm -rf r && echo packed
