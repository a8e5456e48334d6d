#!/bin/bash
# Session 16, call 2: the per-CTA timeline of decode steps (a -DFP8GEMM_TRACE build, decode
# --trace-out, scripts/dev/trace_timeline.py) at b1 and b16 (call 1's trace build failed: static
# shared memory on top of the 2-warpgroup GEMM's ring; marks now live in registers).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for b in decode decode_trace; do xz -dc bundle/dev/$b.xz > bundle/bin/$b; chmod +x bundle/bin/$b; done
D="--device cuda --random-weights qwen3-32b --prompt-len 100 --ignore-eos"
bundle/bin/decode $D --max-new-tokens 16 > $R/warm.log 2>&1
for b in 1 16; do
  bundle/bin/decode $D --max-new-tokens 48 --batch $b > $R/plain-b$b.log 2>&1; grep -E "^TPOT" $R/plain-b$b.log
  bundle/bin/decode_trace $D --max-new-tokens 48 --batch $b --trace-out $R/trace-b$b.bin > $R/trace-b$b.log 2>&1
  grep -E "^TPOT|trace-out|Error" $R/trace-b$b.log
  python3 bundle/dev/trace_timeline.py $R/trace-b$b.bin --steps 4 --csv $R/trace-b$b.csv > $R/timeline-b$b.txt 2>&1
  cat $R/timeline-b$b.txt
  xz -T0 -6 $R/trace-b$b.bin
done
echo "traces done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s16call2.tgz r && rm -rf r && echo packed
