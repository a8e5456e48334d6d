#!/bin/bash
# Session 14, call 3: two loads moved before griddepcontrol.wait on the b1 critical path.
#  (x) the fused norm loads its residual-stream input x before waiting (FP8GEMM_NORM_X_SETTLED,
#      set by Qwen3 where x was written three launches back; CANDLE_FP8_NORM_X_EARLY=0 turns off)
#  (s) the GEMM's math warpgroups wait only before the epilogue, so the first tile's weight
#      scales (constants) load while the previous kernel finishes (compile-time: build b only)
# decode_a = build with (x) only; decode = build with (x) + (s). Tests of build b first.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
printf '#!/bin/bash\nCANDLE_FP8_NORM_X_EARLY=0 exec %s/decode_a "$@"\n' $BIN > $BIN/decode_a0; chmod +x $BIN/decode_a0
for t in gpu gpu_fused qwen3_gpu; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "DECODE_BIN=$BIN/decode_a0 DECODE_BIN=$BIN/decode_a CANDLE_FP8_NORM_X_EARLY=0 X=1" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
timeout 150 $BIN/bench --no-check --shapes 1,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600 16,10240,5120 16,5120,25600 64,4096,4096 128,4096,4096 1,4096,4096 > $R/bench.log 2>&1; echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "m=|M " $R/bench.log | head -30
cd $OUT && tar czf s14call3.tgz r && rm -rf r && echo packed
