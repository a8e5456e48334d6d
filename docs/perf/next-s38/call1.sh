#!/bin/bash
# Prepared in session 36 (not run): the op-path sweep of every compiled configuration on the rows
# closest to their targets after session 36's table (docs/perf/2026-12-04-s36/call6):
#   q|k|v 16 "into" 16.52 hot (target <= 16.42), down 128 43.87 cold (<= 43.75),
#   gate_up 128 88.89 cold (<= 80.3: far), gate_up 16 64.28 hot (<= 62.79).
# then "into" of the dispatched config vs the sweep's best few by `bench --config` (edit CANDS
# after reading the sweep, or run as is for the sweep alone), and decode b1 / b16 / b32 on the
# session-36 build as the reference for the next change.
# bundle/dev: bench.xz, decode.xz (both d136849, packed at the end of session 36).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
for s in 16,10240,5120 128,5120,25600 128,51200,5120 16,51200,5120; do
  timeout 150 $BIN/bench --sweep --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"
  grep -E '^SWEEP ' $R/sweep-$s.txt | sort -t' ' -k12 -g | head -4 | cut -c1-150
  grep -E '^SWEEP-BEST' $R/sweep-$s.txt | cut -c1-200
done
for c in ${CANDS:-}; do  # e.g. CANDS="128,5120,25600@4,128,128,5,3 ..."
  s=${c%@*}; cfg=${c#*@}
  timeout 60 $BIN/bench --shapes $s --columns ours,into --config $cfg > $R/cand-$s-$cfg.txt 2>&1
  echo "$s $cfg rc=$? $(grep -E '^ *m=[0-9]+ *(hot|cold)' $R/cand-$s-$cfg.txt | awk '{printf "%s op %s into %s | ", $2, $4, $6}')"
done
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=s36" "1 16 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
pack_out next37call1
