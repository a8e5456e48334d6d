#!/bin/bash
# Session 13, call 6: the decode step's kernel timeline on the final code (CUPTI injection
# library scripts/dev/ktrace.c, built here on the device against the CUPTI of torch's
# nvidia-cuda-cupti wheel), batch 1 and 16, for ktrace_step.py --layer on the build machine.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin bundle/tools; T0=$(date +%s)
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
CUPTI=$(python3 -c "import nvidia.cuda_cupti as m, os; print(list(m.__path__)[0])" 2>/dev/null)
[[ -d $CUPTI ]] || CUPTI=$(dirname $(dirname $(find / -name cupti.h 2>/dev/null | head -1)))
echo "cupti at $CUPTI"; ls $CUPTI $CUPTI/lib 2>&1 | head
LIB=$(ls $CUPTI/lib/libcupti.so* 2>/dev/null | head -1)
gcc -shared -fPIC -O2 -I$CUPTI/include -I/usr/local/cuda/include bundle/dev/ktrace.c -o bundle/tools/ktrace.so -L$(dirname $LIB) -l:$(basename $LIB) > $R/ktrace-build.txt 2>&1; echo "ktrace build rc=$?"; head -5 $R/ktrace-build.txt
xz -c $LIB > bundle/tools/libcupti.so.13.xz
for b in 1 16; do
  OUT=$R DECODE_TOKENS=12 bash scripts/dev/trace_decode.sh b$b --batch $b
done
echo "done at $(( $(date +%s) - T0 )) s"; ls -la $R
cd $OUT && tar czf s13call6.tgz r && rm -rf r && echo packed
