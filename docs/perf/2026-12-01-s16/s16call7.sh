#!/bin/bash
# Session 16, call 7: with the paced fill (W = 2 default), do the knobs tuned under the old
# queueing still hold? W = 1; the batch-1 norm on one CTA (CANDLE_FP8_NORM_SPLIT=0); the
# residual stream loaded after the norm's wait (CANDLE_FP8_NORM_X_EARLY=0). b1 / b16, x3.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=1 CANDLE_FP8_PREFILL_WINDOW=1 CANDLE_FP8_NORM_SPLIT=0 CANDLE_FP8_NORM_X_EARLY=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s16call7.tgz r && rm -rf r && echo packed
