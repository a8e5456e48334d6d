#!/bin/bash
# Prepared in session 30 (not run). Session 9 found deeper small-M rings no faster (64x64 x 12,
# 64x32 x 16) — when, as session 30's probe showed, the consumer's own wgmma + promotion chain set
# the K block's pace. With the promotion now overlapped (session 30) the ring may bind instead:
# 64x64 x 10 / x 12 and 64x128 x 7 with the overlapped loop (deeper-rings.patch: development keys
# stages + 200, applied here and reverted at the end; 0 spills locally). Harness route, ~2 device
# minutes:  bash docs/perf/next-s31/deeper-rings.sh
git apply docs/perf/next-s31/deeper-rings.patch || exit 1
trap 'git apply -R docs/perf/next-s31/deeper-rings.patch' EXIT
source scripts/dev/harness_prelude.sh
timeout 150 $H --lib /tmp/lib_plain.so check --shapes 17,144,384 40,10240,5120 64,4096,4096 65,1024,256 \
  128,4096,4096 129,272,1920 200,4096,384 3,4096,65536 > $O/check.txt 2>&1
echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -6
timeout 240 $H --lib /tmp/lib_plain.so sweep --no-full \
  --only auto,small_m64x64s8k2,small_m64x64s210k2,small_m64x64s212k2,small_m64x128s6,small_m64x128s207,small_m64x128s6k2,small_m64x128s207k2 \
  --shapes 32,4096,4096 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 48,10240,5120 64,10240,5120 \
  64,5120,8192 > $O/sweep.txt 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
python3 scripts/dev/summarize.py sweep $O/sweep.txt
