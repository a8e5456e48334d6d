#!/bin/bash
# Session 24, call 4 (bundle route): the split tail dispatched (src/dispatch.rs, kernels/gemm.cu):
# M = 193-256 at N <= 4224 -> persistent 128x128 split 2; M = 65-128 with >= 40 column tiles and
# >= 3 K splits -> persistent 128x128 with that split tail (instead of warp-specialized + reduce).
# Build and pack here: bash /work/build.sh && mv bundle/dev/bench.xz bundle/dev/bench_old.xz &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu gpu_reliability
# (bench_old = session 23 call 6's bench: the old dispatch, the same operand distribution).
# 0. tests: gpu, gpu_reliability dev_variants / forced_splits (now with persistent split tails,
#    also on 4 / 5 SMs) / sanitizer_boundary_shapes.
# 1. bench old vs new dispatch on the changed rows, two interleaved rounds (ours / into / cuBLASLt).
#    Prediction (harness op times, call 3): 256x4096^2 -8 %, 224x -4 %, o 128 -12 %, down 128 -5 %.
# 2. the whole bench (BENCH_STAMPS=1, --json) for the table; 4096^3 checks session 23's review
#    commit (bench operands through the crate's quantizers; call 6 had ours into 130.87 / 139.56).
source scripts/dev/call_prelude.sh
run_suites gpu
timeout 240 "$BIN/gpu_reliability" dev_variants forced_splits sanitizer_boundary_shapes --test-threads=1 > "$R/test-rel.txt" 2>&1
echo "dev_variants + forced_splits + sanitizer_boundary_shapes rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
SH="192,4096,4096 224,4096,4096 256,4096,4096 96,5120,8192 128,5120,8192 128,5120,25600 96,5120,25600"
mkdir -p $R/ab
for r in 1 2; do
  for v in new old; do
    b=$BIN/bench; [[ $v == old ]] && b=$BIN/bench_old
    timeout 60 $b --shapes $SH --columns ours,into,lt --samples 15 > $R/ab/bench-$v-r$r.txt 2>&1
    echo "ab $v round $r rc=$? at $(elapsed)"
  done
done
python3 scripts/dev/ab_table.py $R/ab new old --columns ours/into/lt | tee $R/ab-dispatch.txt
BENCH_STAMPS=1 timeout 200 $BIN/bench --json $R/bench.json --full-linear-max-m 1 > $R/bench.log 2>&1
echo "bench rc=$? at $(elapsed)"
grep -E "^\s*(custom|square)?.*4096\s+4096\s+4096" $R/bench.log | head -4
pack_out s24call4
