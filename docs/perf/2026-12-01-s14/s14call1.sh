#!/bin/bash
# Session 14, call 1: are the decode GEMMs' in-step inefficiencies tails?
# (1) per-CTA timeline (harness probe, -DFP8GEMM_PROBE build of the kernels) of the four b1
#     decode GEMMs with their configs and alternative splits: quantiles of entry / first K block
#     / end show a late wave or slow CTAs; (2) decode b1 with the K split of o (5120x8192) and
#     down (5120x25600) forced through CANDLE_FP8_SPLIT (default 4 each).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
python3 scripts/dev/harness.py --lib $PWD/bundle/bin/libfp8gemm_probe.so probe \
  --shapes 1,10240,5120 1,51200,5120 1,5120,8192 1,5120,25600 \
  --only swap_ab8x64s8,swap_ab8x64s8k2,swap_ab8x64s8k4,swap_ab8x64s8k8,swap_ab8x64s8k6,swap_ab8x64s8k3 > $R/probe.txt 2>&1
echo "probe rc=$? at $(( $(date +%s) - T0 )) s"
grep -A3 "PROBE 1" $R/probe.txt | grep -v "^--" | head -80
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh \
  "X=0 CANDLE_FP8_SPLIT=5120x25600=8 CANDLE_FP8_SPLIT=5120x25600=6 CANDLE_FP8_SPLIT=5120x8192=8 CANDLE_FP8_SPLIT=5120x25600=8,5120x8192=8 CANDLE_FP8_SPLIT=5120x25600=3" "1" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s14call1.tgz r && rm -rf r && echo packed
