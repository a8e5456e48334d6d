#!/bin/bash
# Session 13, call 8: where the split norm stops paying: decode b2 / b4 / b8 with
# CANDLE_FP8_NORM_SPLIT=1 vs 0, interleaved x2 (call 7: b1 -0.047 ms, b16 +0.17 ms).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_NORM_SPLIT=1 CANDLE_FP8_NORM_SPLIT=0" "2 4 8" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s13call8.tgz r && rm -rf r && echo packed
