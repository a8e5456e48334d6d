#!/bin/bash
# Prepared in session 32 (not run). Carry bundle/dev (lib_head.so = scripts/dev/build.sh at
# 70d9f64, whose kernels equal 65bc4e0's; run by scripts/dev/harness.py). ~5 device minutes.
# Every compiled config x split on the table's near misses (session 32's table, µs "into" hot /
# cold vs the target): down 32 37.23 / 37.33 vs 37.04 / 38.48; 64x4096^2 5.86 / 6.78 vs 5.59 /
# 6.74; q|k|v 32 18.26 / 16.09 vs 16.49 / 16.48; and q|k|v 16 (17.79 / 17.67 vs 16.02 / 16.52) on
# the 16-token keys only, with the 7-stage key that split2-and-suites.sh dispatches (the harness's
# CONFIGS lack it). The last sweeps of down 32 were sessions 3 and 13, before the overlapped
# loops and the 8-stage 64x128 ring: does another config win now? One timeout per shape.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
H="python3 scripts/dev/harness.py --lib $BIN/lib_head.so"
for s in 32,5120,25600 64,4096,4096 32,10240,5120; do
  timeout 120 $H sweep --no-full --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"; grep BEST $R/sweep-$s.txt
done
timeout 60 $H sweep --no-full --shapes 16,10240,5120 \
  --only auto,swap_ab16x64s8,swap_ab16x64s7,swap_ab16x64s8k2,swap_ab16x64s7k2,swap_ab16x64s7k3,swap_ab16x64s8k3,swap_ab32x64s8,swap_ab32x64s8k2 \
  > $R/sweep-16,10240,5120.txt 2>&1
echo "sweep q|k|v 16 rc=$? at $(elapsed)"
cat $R/sweep-*.txt > $R/sweep.txt
python3 scripts/dev/summarize.py sweep $R/sweep.txt 2>&1 | tail -60
pack_out s33sweep
