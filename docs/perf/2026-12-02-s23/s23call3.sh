#!/bin/bash
# Session 23, call 3 (harness route, repo root; working tree = HEAD + dev keys persistent
# 256x128 s103 (scale prefetch), s203 / 128x128 s205 (activation multicast over 2-CTA clusters)
# + harness.py `power` mode).
# Call 2 found no per-tile transition cost at large M: the time is the steady K-block rate under
# full load (256x128: 1076-1088 ns per K block with 132 CTAs, 773 with 66; the probe's 896 is the
# first K blocks). Is that the board power cap (clock < max at ~690 W) or L2 -> SM traffic
# (which multicast cuts by a third for 256x128)? Prediction: if power, the clock sits ~1500 MHz at
# 132 CTAs and multicast gains only what it saves in energy (a few %); if L2, multicast gains
# up to ~15 %.
source scripts/dev/harness_prelude.sh
$H --lib /tmp/lib_plain.so check --shapes 300,144,384 1000,1024,5120 2048,4096,4096 513,5120,8192 > $O/check.txt 2>&1
tail -1 $O/check.txt
P="persistent256x128s3,persistent256x128s203,persistent128x128s5,persistent128x128s205"
$H --lib /tmp/lib_plain.so power --only $P --shapes 4096,4096,4096 512,8448,4096 > $O/power.txt 2>&1
$H --lib /tmp/lib_plain.so power --only persistent256x128s3 --shapes 256,8448,4096 >> $O/power.txt 2>&1
$H --lib /tmp/lib_plain.so sweep --no-full --only $P --shapes 2048,4096,4096 4096,4096,4096 8192,4096,4096 \
  2048,10240,5120 512,8448,4096 1024,4096,4096 > $O/sweep.txt 2>&1
wait $BPID
$H --lib /tmp/lib_stages.so stages --only persistent256x128s3,persistent256x128s203,persistent128x128s5,persistent128x128s205 \
  --shapes 2048,4096,4096 > $O/stages.txt 2>&1
echo "harness done $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL|Error|error" $O/*.txt | head
grep BITWISE $O/sweep.txt | awk '{print $NF}' | sort | uniq -c
grep STAGES $O/stages.txt | cut -c1-200
grep "^POWER" $O/power.txt
grep "^SWEEP [0-9]" $O/sweep.txt
