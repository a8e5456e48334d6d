#!/bin/bash
# Session 11, second final call (commit 9dee547: the 7-stage tile reverted): GPU suites, then
# decode b1 / b16 twice (TPOT and peak memory) on the code that lands.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
PACK=0 OUT=$R bash bundle/gpu_run.sh env test > $R/test-phase.txt 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s: $(grep '^tests:' $R/summary.txt)"
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_X=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -v "^===" $R/summary.txt
cat $R/dec/sweep-table.txt
grep -h -E "^peak memory" $R/dec/sweep-CANDLE_FP8_X_0-b*-r1.log
cd $OUT && tar czf s11final2.tgz r && rm -rf r && echo packed
