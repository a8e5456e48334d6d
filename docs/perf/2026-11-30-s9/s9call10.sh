#!/bin/bash
# Session 9, call 10: the 4-CTA push sum (small-M split 4) — correctness first (harness check,
# forced splits 1-8 incl. 4, racecheck), then split 4 by cluster (new) vs workspace (old) A/B.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
(cd bundle/kdev_old && bash build.sh > $R/build-old.txt 2>&1) &
(cd bundle/kdev && bash build.sh > $R/build-new.txt 2>&1) &
mkdir -p bundle/bin && tar -xJf bundle/fp8bin.tar.xz -C bundle/bin
wait
echo "built at $(( $(date +%s) - T0 )) s"
BIN=$PWD/bundle/bin
timeout 60 $BIN/gpu_reliability --nocapture --test-threads=1 forced_splits > $R/forced.txt 2>&1; echo "forced rc=$? $(grep '^test result' $R/forced.txt)"
CANDLE_FP8_TEST_PROVIDERS=hopper timeout 70 compute-sanitizer --tool racecheck --error-exitcode 99 --print-limit 20 $BIN/gpu_reliability --test-threads=1 --nocapture forced_splits > $R/racecheck.txt 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck.txt | tail -1) $(grep '^test result' $R/racecheck.txt)"
cd bundle/kdev
timeout 40 python3 harness.py check --shapes 64,4096,4096 48,1024,2048 100,2048,4096 33,272,2048 > $R/check.txt 2>&1; tail -1 $R/check.txt
C=auto,small_m64x128s6k4,small_m64x64s8k4,small_m64x32s8k4,small_m64x64s8k2,small_m64x128s6k2
SH="32,4096,4096 64,4096,4096 128,4096,4096 100,2048,4096"
for v in new old; do
  d=../kdev; [[ $v == old ]] && d=../kdev_old
  timeout 45 python3 harness.py --lib $d/libfp8gemm.so sweep --no-full --only $C --shapes $SH > $R/sweep-$v.txt 2>&1
done
paste <(grep SWEEP $R/sweep-new.txt) <(grep SWEEP $R/sweep-old.txt | awk '{print $6, $7}')
echo "done at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s9c10.tgz r && rm -rf r && echo packed
