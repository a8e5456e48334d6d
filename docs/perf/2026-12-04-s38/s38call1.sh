#!/bin/bash
# Session 38 call 1. (a) = next-s38/call2.sh: stream-K storers of the 8/16-token swap-AB tiles
# read their publishers' partials ahead (read-ahead.patch; same bits; 16-token 74 regs, 8-token 58).
# Predicted q|k|v 16 "into" -0.3 to -0.8 µs, gate_up 16 -0.2 to -0.6, decode b16 -0.01 to -0.05 ms.
# (b) The gate_up hot/cold inversion (s37 table: M=16 hot 64.28 > cold 61.23, M=8 62.05 > 60.64;
# peers not inverted): "cold" with --cold-copies 1 / 2 / 8 and hot's 20 launches per graph, so
# that only the weights' addresses differ. If 1 ~ hot and 2 ~ 8: re-reading the same addresses
# costs; if 1 ~ 8: the hot column's timing, not the addresses.
# (c) op sweeps of gate_up 16 and down 128 (next-s38/call1.sh's remaining shapes).
# bundle/dev: bench_ra, decode_ra, gpu_reliability_ra (patch applied), bench, decode (HEAD + --cold-copies).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
reliability_checks gpu_reliability_ra
bench_ab 2 new@bench_ra= old@bench= -- --shapes 16,10240,5120 12,10240,5120 8,10240,5120 16,51200,5120 --columns ours,into
echo "bench at $(elapsed)"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=head DECODE_BIN=$BIN/decode_ra" "16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
for r in 1 2; do
  for c in 1 2 8; do
    timeout 60 $BIN/bench --no-check --columns into --cold-copies $c --shapes 16,51200,5120 8,51200,5120 1,51200,5120 16,10240,5120 > $R/copies-$c-r$r.txt 2>&1
    echo "cold-copies $c round $r rc=$? at $(elapsed)"
    grep -E "^  m=" $R/copies-$c-r$r.txt | cut -c1-60
  done
done
for s in 16,51200,5120 128,5120,25600; do
  timeout 100 $BIN/bench --sweep --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"
  grep -E '^SWEEP ' $R/sweep-$s.txt | sort -t' ' -k12 -g | head -5 | cut -c1-150
  grep -E '^SWEEP-BEST' $R/sweep-$s.txt | cut -c1-200
done
pack_out s38call1
