#!/bin/bash
# Session 31 call 3 (bundle route, bundle/dev carried): the small-M 64x128 tile on 8 stages
# (overlapped loop) at split 1-2 and on the N-halves loop (6 stages) at split >= 3 — bench /
# decode / gpu / gpu_reliability built from this tree (new) against 09dba4f (bench_old,
# decode_old), and c (bench_c, decode_c): the same but the halves loop only where a split-3+
# K range is <= 32 K blocks (o at 33-64 tokens; down keeps the overlapped loop, 8 stages), since
# call 2's bench had o faster and down slower on the halves loop. Calls 1-2: the 8-stage ring
# 1-2 % faster cold at 128-192x4096^2 and q|k|v 48-64 (harness sweep); the halves loop at
# split >= 3 took back the b48 decode regression.
source scripts/dev/call_prelude.sh
timeout 200 "$BIN/gpu_reliability" dev_variants forced_splits sanitizer_boundary_shapes --test-threads=1 > "$R/test-rel.txt" 2>&1
echo "dev_variants + forced_splits + sanitizer_boundary_shapes rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
AB_COLUMNS=ours/into bench_ab 2 new= c@bench_c= old@bench_old= -- --shapes 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 \
  48,10240,5120 64,10240,5120 48,5120,8192 64,5120,8192 32,5120,25600 48,5120,25600 64,5120,25600 64,51200,5120 \
  --columns ours,into --samples 15 --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
echo "bench_ab rc=$? at $(elapsed)"; tail -25 $R/ab.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_c DECODE_BIN=$BIN/decode_old" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
# (the gpu suite does not fit this carry: next call)
if (( $(date +%s) - T0 < 470 )); then
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout $(( 560 - ($(date +%s) - T0) )) compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$BIN/gpu_reliability" dev_variants --test-threads=1 > "$R/racecheck.txt" 2>&1
  echo "racecheck dev_variants rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' "$R/racecheck.txt" | sort | uniq -c | tr '\n' ' ') at $(elapsed)"
fi
pack_out s31call3
