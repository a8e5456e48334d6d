#!/bin/bash
# Prepared in session 37 (not run): stream-K storers of the 8/16-token swap-AB tiles read their
# publishers' partials ahead (read-ahead.patch: at 3 K blocks before the end of the storer's piece
# — the CTA's last, every load already issued — each math thread acquires the (<= 2) flags and
# loads its elements of the partials into registers when all flags are up, warpgroup-uniform via
# bar.red.and; else the fix-up after the loop as before). Same bits. ptxas: 16-token stream-K 53
# -> 74 registers (three per SM still fit: <= 85), 8-token 46 -> 58; no other kernel changes.
# Session 37's per-piece trace (call 7, small-M tile) put the storers' end 1.6-2.4 µs after their
# loop; the 16-token swap-AB storers' tail after the parallel poll (18d837c) is not measured.
# Prediction: q|k|v 16 "into" -0.3 to -0.8 µs (14.8 -> ~14.2), gate_up 16 -0.2 to -0.6 (its hot
# 64.3 misses 63.0 by 1.3), decode b16 -0.01 to -0.05 ms.
# Build: git apply docs/perf/next-s38/read-ahead.patch; build target/ra (bench, decode, tests);
# pack bench=ra decode=ra gpu_reliability=ra, and HEAD's bench / decode (target/cuda); revert.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
reliability_checks gpu_reliability_ra
bench_ab 2 new@bench_ra= old@bench= -- --shapes 16,10240,5120 12,10240,5120 8,10240,5120 16,51200,5120 --columns ours,into
echo "bench at $(elapsed)"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=head DECODE_BIN=$BIN/decode_ra" "16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out next38call2
