#!/bin/bash
# Session 11, call 3: the standalone norm kernel with the split-K partials' loads batched (one
# L2 round trip instead of one per split): gpu_fused suite, then decode A/B (old = the call-1
# build with the norm in the GEMM off, i.e. the session-10 norm) x3 interleaved, b1 and b16.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for b in decode_new decode_old gpu_fused; do xz -dc bundle/dev/$b.xz > bundle/bin/$b; done; chmod +x bundle/bin/*
cp bundle/bin/decode_new bundle/bin/decode
BIN=$PWD/bundle/bin
timeout 120 $BIN/gpu_fused --nocapture --test-threads=1 > $R/gpu_fused.txt 2>&1; echo "gpu_fused rc=$? $(grep '^test result' $R/gpu_fused.txt)"
export CANDLE_FP8_NORM_GEMM=0
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old DECODE_BIN=$BIN/decode_new" "1 16" > $R/decode.txt 2>&1
echo "done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s11call3.tgz r && rm -rf r && echo packed
