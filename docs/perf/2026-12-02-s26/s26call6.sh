#!/bin/bash
# Session 26, call 6 (harness route, the last ~5 device minutes): the 128x256 warp-specialized
# tile with its N halves promoted in turn (kSerialHalves; registered, not dispatched). Correctness
# on ragged / random shapes through every config (check, NaN-poisoned outputs vs torch), then a
# first sweep on the mid-M shapes where bytes out of L2 bound the time. Predicted (q|k|v 128
# tokens: 78 instead of 105 MB at ~5 TB/s): ~16 us vs 21 with a split that fills the SMs.
source scripts/dev/harness_prelude.sh
kill $BPID 2>/dev/null
timeout 40 $H --lib /tmp/lib_plain.so check --shapes 1,272,2048 70,4096,512 130,10240,5120 300,272,384 200,51200,1024 > $O/check.txt 2>&1
echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -8
timeout 60 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,warp_spec128x256s4,warp_spec128x256s4k2,warp_spec128x256s4k3 \
  --shapes 128,10240,5120 96,10240,5120 128,4096,4096 256,4096,4096 128,51200,5120 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
grep -h "^SWEEP [0-9]\|WRONG" $O/sweep.txt
