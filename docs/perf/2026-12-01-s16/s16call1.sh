#!/bin/bash
# Session 16, call 1: the per-CTA timeline of decode steps (a -DFP8GEMM_TRACE build, decode
# --trace-out, scripts/dev/trace_timeline.py) at b1 and b16, and a free A/B: gate/up split 2 at b1.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for b in decode decode_trace; do xz -dc bundle/dev/$b.xz > bundle/bin/$b; chmod +x bundle/bin/$b; done
D="--device cuda --random-weights qwen3-32b --prompt-len 100 --max-new-tokens 48 --ignore-eos"
bundle/bin/decode $D --max-new-tokens 16 > $R/warm.log 2>&1
for b in 1 16; do
  bundle/bin/decode_trace $D --batch $b --trace-out $R/trace-b$b.bin > $R/trace-b$b.log 2>&1
  grep -E "^TPOT|trace-out" $R/trace-b$b.log
  python3 bundle/dev/trace_timeline.py $R/trace-b$b.bin --steps 4 --csv $R/trace-b$b.csv > $R/timeline-b$b.txt 2>&1
  cat $R/timeline-b$b.txt
  xz -T0 -6 $R/trace-b$b.bin
done
echo "traces done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 WARMUP=0 bash scripts/dev/decode_sweep.sh "X=1 CANDLE_FP8_SPLIT=51200x5120=2" "1" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s16call1.tgz r && rm -rf r && echo packed
