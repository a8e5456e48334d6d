#!/bin/bash
# Session 13, call 3 (dispatch: swap-AB 32x64 at M = 17-32 on wide N, 2-CTA split sums at M =
# 33-64): the gpu suite (Qwen3 shapes now also at M = 24, 32, 48) and gpu_fused; the boundary
# bench with stream launches next to graph launches; then anchors.py (the peers) — call 4 runs
# our bench right after on the same machine.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
BIN=$PWD/bundle/bin
nvidia-smi --query-gpu=name,serial,clocks.sm,temperature.gpu --format=csv,noheader
for t in gpu gpu_fused; do
  timeout 200 $BIN/$t --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt) at $(( $(date +%s) - T0 )) s"
done
grep -h "SKIP\|FAILED\|panicked" $R/test-*.txt | head -5
grep "ok qwen" $R/test-gpu.txt | head -30 | tr '\n' ' '; echo
timeout 60 $BIN/boundary_bench > $R/boundary.txt 2>&1; echo "boundary rc=$?"; cat $R/boundary.txt
timeout 300 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1; echo "anchors rc=$? at $(( $(date +%s) - T0 )) s"
tail -3 $R/anchors.log
cd $OUT && tar czf s13call3.tgz r && rm -rf r && echo packed
