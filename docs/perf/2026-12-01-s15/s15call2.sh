#!/bin/bash
# Session 15 call 2: GPU suites on the refactored norm staging + once-per-CTA math wait, then
# decode TPOT with the swap-AB L2 prefetch knob (CANDLE_FP8_L2_PREFETCH = weight K blocks past
# the ring, per CTA, before the PDL wait) and evict-first weight loads
# (CANDLE_FP8_WEIGHT_EVICT_FIRST=1), interleaved, b1 x2 and b16 x1.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in gpu gpu_fused qwen3_gpu; do
  timeout 240 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -8
S="CANDLE_FP8_L2_PREFETCH=0 CANDLE_FP8_L2_PREFETCH=4 CANDLE_FP8_L2_PREFETCH=8 CANDLE_FP8_L2_PREFETCH=16 CANDLE_FP8_WEIGHT_EVICT_FIRST=1 DECODE_BIN=$PWD/bundle/dev/pf8ef.sh"
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "$S" "1" > $R/decode.txt 2>&1
echo "decode b1 done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec16 REPEAT=1 WARMUP=0 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "$S" "16" > $R/decode16.txt 2>&1
echo "decode b16 done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt $R/dec16/sweep-table.txt
# Kernel timelines (CUPTI) at b1: off, prefetch 8, evict-first
mkdir -p bundle/tools
CUPTI=$(python3 -c "import nvidia.cuda_cupti as m, os; print(list(m.__path__)[0])" 2>/dev/null)
[[ -d $CUPTI ]] || CUPTI=$(dirname $(dirname $(find / -name cupti.h 2>/dev/null | head -1)))
LIB=$(ls $CUPTI/lib/libcupti.so* 2>/dev/null | head -1)
gcc -shared -fPIC -O2 -I$CUPTI/include -I/usr/local/cuda/include bundle/dev/ktrace.c -o bundle/tools/ktrace.so -L$(dirname $LIB) -l:$(basename $LIB) > $R/ktrace-build.txt 2>&1; echo "ktrace build rc=$?"
xz -c $LIB > bundle/tools/libcupti.so.13.xz
OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b1 --batch 1
CANDLE_FP8_L2_PREFETCH=8 OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b1-pf8 --batch 1
CANDLE_FP8_WEIGHT_EVICT_FIRST=1 OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b1-ef --batch 1
for f in $R/*.csv; do xz -T0 $f; done
echo "traces done at $(( $(date +%s) - T0 )) s"
# Mid-M dispatch on the Qwen3 shapes (call 1: 192x10240x5120 64x128 unsplit 32.3 vs auto 37.6 us)
ONLY=auto,small_m64x128s6,small_m64x128s6k2,small_m64x128s6k3,warp_spec128x128s6,warp_spec128x128s6k2,warp_spec128x64s8,persistent128x128s5,persistent256x128s3
python3 scripts/dev/harness.py --lib bundle/dev/libfp8gemm.so sweep --no-full --only $ONLY --shapes 128,10240,5120 \
  192,10240,5120 256,10240,5120 160,10240,5120 128,51200,5120 192,51200,5120 256,51200,5120 128,5120,25600 \
  192,5120,25600 256,5120,25600 128,5120,8192 256,5120,8192 2>&1 | grep -v "^SWEEP M" | tee $R/sweep-midm.txt | grep BEST
echo "sweep done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s15call2.tgz r && rm -rf r && echo packed
