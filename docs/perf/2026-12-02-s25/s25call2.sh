#!/bin/bash
# Session 25, call 2 (bundle route): persistent CTAs trigger their dependents late (producer,
# after its last load) instead of after their first tile. Call 1's table had ours "into" (launch
# chained to the previous one by PDL) 3-10 % slower than the allocating op at large M (down 2048
# into 548.9 / 529.8 vs op 498.6 µs). Hypothesis: with the early trigger the next launch's CTAs
# take the SMs of the CTAs with one tile fewer (the partial last round) a whole round early and
# stay out of phase with the others (no shared operands in L2), launch after launch.
# Prediction: into -> op at large M (down 2048 -5..-9 %, 4096^3 cold -5 %); op unchanged.
# Pack here: mv bundle/dev/{bench,decode}.xz to *_old.xz (main), bash /work/build.sh,
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode gpu gpu_reliability
source scripts/dev/call_prelude.sh
run_suites gpu
SH="2048,5120,25600 2048,5120,8192 2048,51200,5120 2048,10240,5120 512,4096,4096 1024,4096,4096 2048,4096,4096 4096,4096,4096 8192,4096,4096 100,5120,8192 100,5120,25600"
mkdir -p $R/ab
for r in 1 2; do
  for v in new old; do
    b=$BIN/bench; [[ $v == old ]] && b=$BIN/bench_old
    timeout 100 $b --shapes $SH --columns ours,into --samples 15 --no-check > $R/ab/bench-$v-r$r.txt 2>&1
    echo "ab $v round $r rc=$? at $(elapsed)"
  done
done
python3 scripts/dev/ab_table.py $R/ab new old --columns ours/into | tee $R/ab-trigger.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=16 timeout 120 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "1" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/decode.txt
pack_out s25call2
