#!/bin/bash
# Session 30, call 2: the small-M tiles with the promotion overlapped across K blocks (stages +
# 200 keys: 64x32 s208, 64x64 s208, 64x128 s206; mainloop_xpromote.cuh, one warpgroup, full-width
# wgmma). Call 1's probe: the 64x64 tile's K block is 320 ns = wait 64 + MMA 160 + promotion 32
# + the rest, with the data already there (consumer-bound). Predicted: ~250 ns per K block (the
# one-ring ingest rate of 16 KB stages), 64x4096^2 split 2 ~ -1 us.
#   bash docs/perf/2026-12-03-s30/s30call2.sh
source scripts/dev/harness_prelude.sh
timeout 200 $H --lib /tmp/lib_plain.so check --shapes 1,4096,4096 17,144,384 40,10240,5120 63,256,128 \
  64,4096,4096 65,1024,256 100,5120,8192 128,4096,4096 129,272,1920 200,4096,384 256,4096,4096 3,4096,65536 \
  > $O/check.txt 2>&1
echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -10
for tool in racecheck memcheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $H --lib /tmp/lib_plain.so sanitize --quick > $O/$tool.txt 2>&1
  echo "$tool rc=$? $(grep -h 'SUMMARY\|sanitize driver' $O/$tool.txt | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
done
X=small_m64x32s8,small_m64x32s208,small_m64x64s8,small_m64x64s208,small_m64x64s8k2,small_m64x64s208k2,small_m64x128s6,small_m64x128s206,small_m64x128s6k2,small_m64x128s206k2
timeout 240 $H --lib /tmp/lib_plain.so sweep --no-full --only auto,$X,small_m64x64s8k3,small_m64x64s208k3,small_m64x128s6k3,small_m64x128s206k3 \
  --shapes 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 256,4096,4096 32,10240,5120 64,10240,5120 \
  128,10240,5120 64,5120,8192 128,5120,8192 128,5120,25600 64,51200,5120 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
wait $BPID
timeout 60 $H --lib /tmp/lib_stages.so stages --only small_m64x64s208k2,small_m64x128s206k2,small_m64x128s206 \
  --shapes 64,4096,4096 128,4096,4096 > $O/stages.txt 2>&1
echo "stages rc=$? at $(( $(date +%s) - T0 )) s"
grep -h "^STAGES" $O/stages.txt | sed 's/ flight.*//' | head -12
python3 scripts/dev/summarize.py sweep $O/sweep.txt 2>&1 | tail -60
