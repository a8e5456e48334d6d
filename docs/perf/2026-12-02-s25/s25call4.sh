#!/bin/bash
# Session 25, call 4 (bundle route): the split-tail rounds model at M > 256, dispatched where it
# predicts >= 10 % (src/dispatch.rs, kernels/gemm.cu auto_config). bench (new dispatch) vs
# bench_old (main: plain persistent tiles) on the flipped shapes, two interleaved rounds, with the
# bench's accuracy check against the GPU f32 reference (call 3's harness sweep checked only the
# shapes under 2^36 MACs). Prediction from call 3 (harness, plain vs tail config): -5..-19 %.
# Pack here: bench_old.xz = main's bench; bash /work/build.sh; scripts/dev/pack.sh bench.
source scripts/dev/call_prelude.sh
SH="640,4096,4096 768,4096,4096 512,5120,8192 1024,5120,8192 512,5120,25600 1024,5120,25600 512,10240,5120 640,10240,5120 512,51200,5120"
mkdir -p $R/ab
for r in 1 2; do
  for v in new old; do
    b=$BIN/bench; [[ $v == old ]] && b=$BIN/bench_old
    timeout 100 $b --shapes $SH --columns ours,into --samples 15 --json $R/ab/$v-r$r.json > $R/ab/bench-$v-r$r.txt 2>&1
    echo "ab $v round $r rc=$? at $(elapsed)"
  done
done
python3 -c "
import json
for r in json.load(open('$R/ab/new-r1.json'))['rows']:
    if r['temp'] == 'hot': print('relerr', r['m'], r['n'], r['k'], r.get('relerr'))"
python3 scripts/dev/ab_table.py $R/ab new old --columns ours/into | tee $R/ab-tail.txt
pack_out s25call4
