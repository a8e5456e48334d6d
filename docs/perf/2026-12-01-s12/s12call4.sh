#!/bin/bash
# Session 12, call 4 (final code, commit bc57acd's binaries): the six GPU suites, then decode
# b1 / b16 twice with the default launch-ahead.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
for t in qwen3_gpu gpu_sampling gpu_attention gpu_fused gpu gpu_reliability; do
  lim=120; [[ $t == gpu_reliability ]] && lim=230
  timeout $lim $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP" $R/test-*.txt | head
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LAUNCH_AHEAD=1" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -h "^TTFT\|^TPOT\|^peak memory\|^id readback" $R/dec/sweep-*-b1-r1.log $R/dec/sweep-*-b16-r1.log
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s12call4.tgz r && rm -rf r && echo packed
