#!/bin/bash
# Session 14, call 6: kernel timelines (CUPTI, scripts/dev/ktrace.c built here) of decode b1 and
# b16 with the separate SwiGLU kernel (default) and with the 256-row gated gate/up epilogue
# (--swiglu-epilogue, CANDLE_FP8_SWIGLU_TILE=256), to see where the epilogue variant loses at
# b1 (+0.5 ms) and gains at b16 (-0.1 ms). Build of call 5 (its default and 256-row paths are
# the final code's).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin bundle/tools; T0=$(date +%s)
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
CUPTI=$(python3 -c "import nvidia.cuda_cupti as m, os; print(list(m.__path__)[0])" 2>/dev/null)
[[ -d $CUPTI ]] || CUPTI=$(dirname $(dirname $(find / -name cupti.h 2>/dev/null | head -1)))
LIB=$(ls $CUPTI/lib/libcupti.so* 2>/dev/null | head -1)
gcc -shared -fPIC -O2 -I$CUPTI/include -I/usr/local/cuda/include bundle/dev/ktrace.c -o bundle/tools/ktrace.so -L$(dirname $LIB) -l:$(basename $LIB) > $R/ktrace-build.txt 2>&1; echo "ktrace build rc=$?"
xz -c $LIB > bundle/tools/libcupti.so.13.xz
for b in 1 16; do
  OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b$b --batch $b
  CANDLE_FP8_SWIGLU_TILE=256 OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b$b-ep256 --batch $b --swiglu-epilogue
done
echo "done at $(( $(date +%s) - T0 )) s"
for f in $R/*.csv; do xz -T0 $f; done
cd $OUT && tar czf s14call6.tgz r && rm -rf r && echo packed
