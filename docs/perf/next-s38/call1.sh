#!/bin/bash
# Prepared in session 37 (not run; session 36's op-path sweep, retargeted): the op-path sweep of
# every compiled configuration on the rows nearest their targets after session 37's table
# (docs/perf/2026-12-04-s37/call5/r/final-table.md), "into" hot / cold µs vs target:
#   64×4096² 5.81 / 6.79 (<= 5.59 / 6.74), down 128 43.55 / 43.84 (<= 41.42 / 44.51 vs this run's
#   cuBLASLt), gate_up 16 64.28 / 61.23 (<= 63.00 / 63.03), q|k|v 32 18.30 / 16.44 (<= 16.08 / 16.56).
# Then "into" of candidates by `bench --config` (CANDS="SHAPE@CONFIG ...", after reading the
# sweep), and decode b1 / b16 / b32 on HEAD as the reference for the next change.
# bundle/dev: bench.xz, decode.xz of HEAD (CARGO_TARGET_DIR=target/cuda bash scripts/dev/pack.sh bench decode).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for s in 64,4096,4096 128,5120,25600 16,51200,5120 32,10240,5120; do
  timeout 150 $BIN/bench --sweep --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"
  grep -E '^SWEEP ' $R/sweep-$s.txt | sort -t' ' -k12 -g | head -4 | cut -c1-150
  grep -E '^SWEEP-BEST' $R/sweep-$s.txt | cut -c1-200
done
for c in ${CANDS:-}; do  # e.g. CANDS="128,5120,25600@4,128,128,5,3 ..."
  config_ab "cand-${c%@*}" "${c%@*}" - "${c#*@}"
done
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=head" "1 16 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
pack_out next38call1
