#!/bin/bash
# Session 30, call 3 (bundle route): the small-M 64x64 / 64x128 tiles with the promotion overlapped
# across K blocks as the dispatched loops (bench, decode, gpu tests of the new build) against the
# previous loops (bench_old, decode_old: the same tree before the swap, 59fadf3).
#  1. gpu_reliability dev_variants (new loop vs the previous one, stages + 100, bitwise)
#     + forced_splits + sanitizer_boundary_shapes (racecheck: call 2 ran the harness's on the same
#     loops, 0 hazards); the gpu suite last;
#  2. bench new vs old, two interleaved rounds, op / into / our cuBLASLt, on the missed rows below
#     M = 512 that these tiles serve;
#  3. the decode step at 48 / 64 sequences (q|k|v, o, gate_up, down at M = 48 / 64), new vs old:
#     session 29's lesson (a faster "into" can be a slower step);
#  4. the peers (anchors.py: torch's cuBLASLt, Triton) on the changed 4096^2 rows and q|k|v 64.
source scripts/dev/call_prelude.sh
timeout 120 "$BIN/gpu_reliability" dev_variants forced_splits sanitizer_boundary_shapes --test-threads=1 > "$R/test-rel.txt" 2>&1
echo "dev_variants + forced_splits + sanitizer_boundary_shapes rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
AB_COLUMNS=ours/into/lt bench_ab 2 new= old@bench_old= -- --shapes 64,4096,4096 128,4096,4096 160,4096,4096 \
  192,4096,4096 224,4096,4096 256,4096,4096 48,10240,5120 64,10240,5120 96,10240,5120 64,5120,8192 \
  128,5120,25600 64,51200,5120 --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
timeout 150 python3 bundle/dev/anchors.py --shapes 64,4096,4096 128,4096,4096 160,4096,4096 192,4096,4096 \
  256,4096,4096 64,10240,5120 --no-ceilings --json $R/anchors.json > $R/anchors.log 2>&1
echo "anchors rc=$? at $(elapsed)"; grep -v "^#" $R/anchors.log | tail -8
run_suites gpu
echo "A/B (µs hot / cold, op / into / our cuBLASLt):"; tail -30 $R/ab.txt
pack_out s30call3
