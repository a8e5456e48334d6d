#!/bin/bash
# Session 31 call 2 (bundle route; bundle/dev carried). Two experiments prepared in session 30:
# A. decode-split3: bench / decode at 09dba4f (new) vs the same with split >= 3 on the N-halves
#    loop (b: docs/perf/2026-12-03-s31/split3-halves.patch) vs 59fadf3 (old: the loops before the
#    overlapped promotion was dispatched). Session 30 had decode b48 0.6 % slower with the new loop.
# B. deeper small-M rings with the overlapped loop: lib_rings.so built here by scripts/dev/build.sh
#    from 09dba4f + docs/perf/2026-12-03-s31/deeper-rings.patch + a 64x128 x 8 key (s208), harness_rings.py
#    the harness with those keys (64x64 x 10 / x 12: s210 / s212; 64x128 x 7 / x 8: s207 / s208).
#    The per-ring ingest (session 29) is latency x depth bound: a deeper ring should pay where the
#    overlapped consumer now outruns it (long K loops: 128-192x4096^2).
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_b DECODE_BIN=$BIN/decode_old" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
AB_COLUMNS=ours/into/lt bench_ab 2 new= b@bench_b= old@bench_old= -- --shapes 48,5120,8192 64,5120,8192 48,5120,25600 64,5120,25600 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
echo "bench_ab rc=$? at $(elapsed)"; tail -8 $R/ab.txt
H="python3 bundle/dev/harness_rings.py --lib $BIN/lib_rings.so"
timeout 100 $H check --shapes 17,144,384 40,10240,5120 64,4096,4096 65,1024,256 128,4096,4096 129,272,1920 \
  200,4096,384 3,4096,65536 > $R/check.txt 2>&1
echo "check rc=$? at $(elapsed)"; grep -E "^CHECK|FAIL" $R/check.txt | head -6
timeout 220 $H sweep --no-full \
  --only auto,small_m64x64s8k2,small_m64x64s210k2,small_m64x64s212k2,small_m64x128s6,small_m64x128s207,small_m64x128s208,small_m64x128s6k2,small_m64x128s207k2,small_m64x128s208k2 \
  --shapes 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 48,10240,5120 64,10240,5120 64,5120,8192 > $R/sweep.txt 2>&1
echo "sweep rc=$? at $(elapsed)"
python3 scripts/dev/summarize.py sweep $R/sweep.txt 2>&1 | tail -40
pack_out s31call2
