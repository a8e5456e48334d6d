#!/bin/bash
# Session 11, call 5: the down GEMM with SiLU·up in its prologue (M <= 2): gpu_fused suite
# (bit-exact test), racecheck + memcheck of it (quick shapes), decode b1 A/B x3 interleaved:
# prologue on (7 stages) / off (swiglu_quant launch + GEMM) / 6 stages / 8 stages; b16 once.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
tar -xJf bundle/fp8bin.tar.xz -C bundle/bin
BIN=$PWD/bundle/bin
timeout 150 $BIN/gpu_fused --nocapture --test-threads=1 > $R/gpu_fused.txt 2>&1; echo "gpu_fused rc=$? $(grep '^test result' $R/gpu_fused.txt)" | tee -a $R/summary.txt
for tool in racecheck memcheck; do
  CANDLE_FP8_GPU_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_fused --test-threads=1 --nocapture down_gemm_with_swiglu > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)" | tee -a $R/summary.txt
done
echo "checks done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_SWIGLU_IN=1 CANDLE_FP8_SWIGLU_IN=0 CANDLE_FP8_SWIGLU_IN_STAGES=6 CANDLE_FP8_SWIGLU_IN_STAGES=8" "1" > $R/decode.txt 2>&1
WARMUP=0 OUT=$R/dec16 REPEAT=1 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_SWIGLU_IN=1" "16" > $R/decode16.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt $R/dec16/sweep-table.txt
cd $OUT && tar czf s11call5.tgz r && rm -rf r && echo packed
