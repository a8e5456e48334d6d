#!/bin/bash
# Session 15, call 7: which GEMMs should stream their weights evict-first? One build, dev knob
# CANDLE_FP8_WEIGHT_EVICT_FIRST = 0 off / 1 plain swap-AB (not gated) / 2 all swap-AB /
# 3 weight matrices >= L2; decode b1, b8, b16, four interleaved rounds.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
OUT=$R/dec REPEAT=4 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "CANDLE_FP8_WEIGHT_EVICT_FIRST=0 CANDLE_FP8_WEIGHT_EVICT_FIRST=1 CANDLE_FP8_WEIGHT_EVICT_FIRST=2 CANDLE_FP8_WEIGHT_EVICT_FIRST=3" "1 8 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s15call7.tgz r && rm -rf r && echo packed
