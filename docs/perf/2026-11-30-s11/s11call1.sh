#!/bin/bash
# Session 11, call 1: GPU suites (incl. the new norm-in-GEMM bit-exact test), racecheck +
# memcheck of that test (quick shapes), decode b1 A/B x3 interleaved: norm in the GEMM on
# (default 5 stages) / off (norm kernel + GEMM) / 4 stages / 6 stages.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
PACK=0 OUT=$R bash bundle/gpu_run.sh env test > $R/test-phase.txt 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s: $(grep '^tests:' $R/summary.txt)"
BIN=$PWD/bundle/bin
timeout 60 $BIN/gpu_fused --nocapture --test-threads=1 gemm_with_the_norm qwen3_fused > $R/normgemm.txt 2>&1; echo "norm gemm tests rc=$? $(grep '^test result' $R/normgemm.txt)" | tee -a $R/summary.txt
for tool in racecheck memcheck; do
  CANDLE_FP8_GPU_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_fused --test-threads=1 --nocapture gemm_with_the_norm > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)" | tee -a $R/summary.txt
done
echo "sanitizers done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_NORM_GEMM=1 CANDLE_FP8_NORM_GEMM=0 CANDLE_FP8_NORM_GEMM_STAGES=4 CANDLE_FP8_NORM_GEMM_STAGES=6" "1" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -v "^===" $R/summary.txt
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s11call1.tgz r && rm -rf r && echo packed
