#!/bin/bash
# Session 26, call 7 (run at the end of the session). What binds mid M? q|k|v at 128 tokens runs 80 warp-specialized
# 128x128 CTAs on 80 of 132 SMs in ~21 us (~1.7x its HBM floor); stream-K over all 132 SMs and a
# 128x256 tile (fewer L2 bytes) were both slower (docs/PERF.md "Session 26"). The per-stage probe
# of the same tile at 20 / 40 / 80 / 160 column tiles (N = 2560 .. 20480, K = 5120, M = 128)
# says whether the per-K-block period grows with the number of busy SMs (a shared limit: L2 / HBM
# / crossbar) or stays flat (a per-SM limit: then more CTAs per SM or per-SM bytes are the lever),
# and where the time goes in a K block (c_wait = data late, mma, promote, handoff).
# Harness route (kernels built on the device), ~2 device minutes:
#   bash docs/perf/2026-12-02-s26/s26call7.sh
source scripts/dev/harness_prelude.sh
wait $BPID
for cfg in warp_spec128x128s6 small_m64x128s6; do
  timeout 120 $H --lib /tmp/lib_stages.so stages --only $cfg \
    --shapes 128,2560,5120 128,5120,5120 128,10240,5120 128,20480,5120 > $O/stages-$cfg.txt 2>&1
  echo "$cfg rc=$? at $(( $(date +%s) - T0 )) s"
done
grep -h -v "^ *$" $O/stages-*.txt | head -80
