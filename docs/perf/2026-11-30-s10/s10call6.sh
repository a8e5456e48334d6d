#!/bin/bash
# Session 10 call 6: decode b16 — the step attention's plan (position splits x head splits,
# tail merge) around the default (1 x 4 at b16), and the old build once more (16 x 64 x 8).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c6; mkdir -p $R bundle/bin bundle/bin_old
xz -dc bundle/dec/decode_old.xz > bundle/bin_old/decode && xz -dc bundle/dec/decode_new.xz > bundle/bin/decode && chmod +x bundle/bin_old/decode bundle/bin/decode
cp bundle/kdev/decode_sweep.sh scripts/dev/decode_sweep.sh
OUT=$R REPEAT=2 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_STEP_ATTENTION=one CANDLE_FP8_STEP_ATTENTION=one:2,4 CANDLE_FP8_STEP_ATTENTION=one:2,8 CANDLE_FP8_STEP_ATTENTION=one:1,8 CANDLE_FP8_STEP_ATTENTION=one:2,2 DECODE_BIN=bundle/bin_old/decode" "16" > $R/decode.txt 2>&1
cat $R/sweep-table.txt
cd $OUT && tar czf s10c6.tgz s10c6 && rm -rf s10c6
