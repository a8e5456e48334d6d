#!/bin/bash
# Session 12, call 8: greedy argmax on the lm_head's bf16 logits (no f32 cast launch). GPU suites
# gpu_sampling (bf16 rows, views, sampler) and qwen3_gpu; decode b1 / b16, old (bc57acd: f32
# cast + f32 argmax) vs new, x4 interleaved.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin; cp $BIN/decode_new $BIN/decode
for t in gpu_sampling qwen3_gpu; do
  timeout 100 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt)"
done
grep -h "panicked\|FAILED" $R/test-*.txt | head -5
OUT=$R/dec REPEAT=4 DECODE_TIMEOUT=40 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old DECODE_BIN=$BIN/decode_new" "1 16" > $R/decode.txt 2>&1
echo "done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s12call8.tgz r && rm -rf r && echo packed
