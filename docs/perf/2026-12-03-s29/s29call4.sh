#!/bin/bash
# Session 29 call 4 (bundle route + harness): the 64 x 64 x 4-stage small-M tile (two or three
# CTAs per SM) dispatched at M = 33-64 where 64 x 128 tiles fill <= 65 % of the SMs (q|k|v).
# bench (new dispatch) vs bench_old (= 3cf683b's dispatch, the same rule as HEAD before this
# change at these shapes), two interleaved rounds, op / into / our cuBLASLt; 32 tokens (swap-AB,
# unchanged) and 64x4096^2 (unchanged) as controls; the peers on the q|k|v rows in the same run;
# the rule's edges (67 / 85 / 86 / 96 tiles) in the harness; gpu suites and the harness check +
# racecheck on the new config.
source scripts/dev/call_prelude.sh
AB_COLUMNS=ours/into/lt bench_ab 2 new= old@bench_old= -- --shapes 40,10240,5120 48,10240,5120 64,10240,5120 32,10240,5120 64,4096,4096 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" | tee $R/ab-shallow.txt
timeout 150 python3 bundle/dev/anchors.py --shapes 48,10240,5120 64,10240,5120 --no-ceilings --json $R/anchors.json > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"; grep -v "^#" $R/anchors.log | tail -8
run_suites gpu
timeout 200 "$BIN/gpu_reliability" forced_splits --test-threads=1 > "$R/test-rel.txt" 2>&1
echo "forced_splits rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
bash scripts/dev/build.sh > $R/build.txt 2>&1 || { tail -5 $R/build.txt; }
H="python3 scripts/dev/harness.py --lib ./libfp8gemm.so"
timeout 120 $H check --shapes 40,10240,5120 33,8576,2048 63,10880,4096 48,272,2048 64,10240,5120 37,9000,4096 > $R/check.txt 2>&1
echo "check rc=$? at $(elapsed)"; grep -E "^CHECK|FAIL" $R/check.txt | head -6
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $H sanitize --quick > $R/racecheck.txt 2>&1
echo "racecheck rc=$? $(grep -h 'SUMMARY\|sanitize driver' $R/racecheck.txt | tr '\n' ' ') at $(elapsed)"
timeout 100 $H sweep --no-full --only auto,small_m64x64s4,small_m64x128s6 \
  --shapes 48,8576,5120 48,10880,5120 48,11008,5120 48,12288,5120 > $R/sweep-edges.txt 2>&1
echo "edges at $(elapsed)"; grep "^SWEEP" $R/sweep-edges.txt | grep -v " M N "
echo "A/B (µs hot / cold, op / into / our cuBLASLt):"; tail -14 $R/ab-shallow.txt
pack_out s29call4
