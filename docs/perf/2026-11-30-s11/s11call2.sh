#!/bin/bash
# Session 11, call 2: racecheck of the norm GEMM after the __syncwarp fix; kernel timelines of
# decode b1 with the norm in the GEMM on / off (ktrace), for the per-kernel durations.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/decode.xz > bundle/bin/decode; xz -dc bundle/dev/gpu_fused.xz > bundle/bin/gpu_fused; chmod +x bundle/bin/*
cp -r bundle/dev/tools bundle/tools
BIN=$PWD/bundle/bin
for tool in racecheck; do
  CANDLE_FP8_GPU_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 $BIN/gpu_fused --test-threads=1 --nocapture gemm_with_the_norm > $R/san-$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/san-$tool.txt | tail -1) $(grep '^test result' $R/san-$tool.txt)"
done
timeout 60 $BIN/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --max-new-tokens 8 --ignore-eos > $R/warm.log 2>&1
OUT=$R CANDLE_FP8_NORM_GEMM=1 bash scripts/dev/trace_decode.sh on --batch 1
OUT=$R CANDLE_FP8_NORM_GEMM=0 bash scripts/dev/trace_decode.sh off --batch 1
echo "done at $(( $(date +%s) - T0 )) s"
cd $R && xz -T4 trace-*.csv; cd $OUT && tar czf s11call2.tgz r && rm -rf r && echo packed
