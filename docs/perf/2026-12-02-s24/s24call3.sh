#!/bin/bash
# Session 24, call 3 (harness route): where to dispatch the split tail. Call 2 (one run each):
# 4096^2 M = 192 / 256 persistent 128x128 split 2 faster than today's one wave of 64 x 128 tiles
# (10.92 / 12.20 vs 12.17 / 13.40 us at 256) but M = 160 slower (13.08 vs 11.67) although its
# tiles are those of M = 192: repeat over M = 144-256, two rounds. M = 128 o / down: persistent
# 128x128 split 3 (fix-up in the kernel) vs warp-specialized split 3 (workspace + reduce launch):
# 16.69 vs 18.80 us at o; check M = 80-128. 10240x5120 at M = 160-256: 128x128 split 4 vs
# 256x128. Large M: down / o 2048, 256x128 split 2 vs 128x128 in power mode (steady state), again.
source scripts/dev/harness_prelude.sh
el() { echo "$(( $(date +%s) - T0 )) s"; }
P=persistent
SW="timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full"
for r in 1 2; do
  $SW --only auto,${P}128x128s5k2 --shapes 144,4096,4096 160,4096,4096 176,4096,4096 192,4096,4096 \
    208,4096,4096 224,4096,4096 240,4096,4096 256,4096,4096 > $O/sweep-sq-r$r.txt 2>&1
  echo "sq round $r rc=$? at $(el)"
done
$SW --only auto,${P}128x128s5k3 --shapes 80,5120,8192 96,5120,8192 112,5120,8192 128,5120,8192 \
  80,5120,25600 96,5120,25600 112,5120,25600 128,5120,25600 > $O/sweep-m128.txt 2>&1
echo "m128 rc=$? at $(el)"
$SW --only auto,${P}128x128s5k4,${P}128x128s5k3 --shapes 160,10240,5120 192,10240,5120 256,10240,5120 > $O/sweep-qkv.txt 2>&1
echo "qkv rc=$? at $(el)"
for r in 1 2; do
  timeout 60 $H --lib /tmp/lib_plain.so power --only ${P}256x128s3k2,${P}128x128s5 --shapes 2048,5120,25600 2048,5120,8192 > $O/power-r$r.txt 2>&1
done
echo "power at $(el)"
grep -h -E "Error|error|Traceback|WRONG" $O/sweep-*.txt $O/power-*.txt | head -8
for f in $O/sweep-*.txt; do grep -h "^SWEEP [0-9]" $f | awk -v f=$(basename $f .txt) '{printf "%-12s %s %s %s %-26s %8s %8s\n", f, $2, $3, $4, $5, $6, $7}'; done
grep -h "^POWER [0-9]" $O/power-*.txt
