#!/bin/bash
# Session 9, call 5: decode TPOT on this build (b1, b16, twice), and where the tiny model's
# GPU top-1 disagreements come from: accuracy mode with the fused kernels on / off.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R
OUT=$R REPEAT=2 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_X=0" "1 16" > $R/decode-sweep.txt 2>&1
cat $R/sweep-table.txt
BIN=bundle/bin
for flags in "" "--no-fused-attention" "--no-fused-elementwise" "--no-fused-attention --no-fused-elementwise" "--no-fuse --no-fused-attention --no-fused-elementwise"; do
  tag=$(echo "x$flags" | tr -c 'A-Za-z0-9\n' '_')
  timeout 120 $BIN/decode --device cuda --check-accuracy 256 --max-new-tokens 8 $flags > $R/acc-$tag.log 2>&1
  echo "[$flags] rc=$? $(grep -iE 'top-1|agree' $R/acc-$tag.log | head -3 | tr '\n' ' ')"
done
cd $OUT && tar czf s9c5.tgz r && rm -rf r && echo packed
