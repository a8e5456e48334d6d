#!/bin/bash
# Session 12, call 7: where the b1 decode step's small kernels spend their time. ncu (serialized,
# caches and clocks as they come) on the first 8 norm / attention / SwiGLU launches of decode
# step 4 (two layers): duration, warp-state stall reasons, memory and scheduler statistics.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
NCU="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
mkdir -p bundle/bin && xz -dc bundle/dev/decode.xz > bundle/bin/decode && chmod +x bundle/bin/decode
timeout 240 "$NCU" --profile-from-start off --clock-control none --cache-control none \
  --kernel-name regex:"decode_attention|swiglu_quant|add_rmsnorm" --launch-count 8 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SourceCounters \
  bundle/bin/decode --device cuda --random-weights qwen3-32b --prompt-len 100 --max-new-tokens 6 \
  --ignore-eos --batch 1 --warmup 1 --profile-step 4 > $OUT/ncu-small-kernels.txt 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_:<>0-9, ]+\(|Duration|Stall|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible|L2 Hit|DRAM Through|Memory Throughput|Registers Per|Grid Size|Block Size|Long Scoreboard|Barrier" $OUT/ncu-small-kernels.txt | head -150
