#!/bin/bash
# Session 20, call 3: the 16-token swap-AB tile with 7 stages (three CTAs per SM) at >= 3 waves
# of tiles (the plain gate/up GEMM at 9-16 tokens). Checks (gpu suite with the new rounding test,
# forced splits incl. the new config), then bench new vs main interleaved, the peers on the same
# row (anchors.py), and decode b16 new vs main (the step's gate/up runs the SwiGLU tile: expect no change).
source scripts/dev/call_prelude.sh
SUITE_TIMEOUT=250 run_suites gpu
timeout 150 $BIN/gpu_reliability --test-threads=1 forced_splits > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "hopper:\|cublaslt:" $R/test-gpu.txt | head -8
SH="16,51200,5120 12,51200,5120 9,51200,5120 16,10240,5120"
for r in 1 2; do for v in bench bench_main; do
  timeout 120 $BIN/$v --shapes $SH --columns ours,into --samples 15 > $R/$v-r$r.txt 2>&1
  echo "$v r$r rc=$? at $(elapsed)"
done; done
timeout 200 python3 bundle/dev/anchors.py --shapes 16,51200,5120 --no-ceilings --json $R/anchors.json > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_main" "16" > $R/decode.txt 2>&1
pack_out s20call3
tar xzf $OUT/s20call3.tgz -C /tmp && cd /tmp/r && for f in bench-r1 bench_main-r1 bench-r2 bench_main-r2; do
  echo "== $f"; grep " into " $f.txt | sed 's/ lt .*//'; done
tail -12 anchors.log; cat dec/sweep-table.txt
