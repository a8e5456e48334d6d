#!/bin/bash
# Prepared in session 20 (not run): two quick questions for session 21, no code change needed.
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode gpu_fused gpu_attention qwen3_gpu &&
#   cp docs/perf/next-s21/s21call1.sh bundle/dev/
# Run: bash bundle/dev/s21call1.sh with carry ["bundle/dev"] (~5 min).
#
# 0. The fused-kernel suites on the current GEMM body (session 20 moved the stage release into a
#    lambda; gpu and forced_splits ran on it, these three last ran on the build before).
#
# 1. Large M under the power cap: SM clock and power next to each timing (ours, ours into, our
#    cuBLASLt provider) at 2048 / 4096 x 4096². If ours runs at a lower clock than cuBLASLt for the
#    same time, our main loop spends more energy per FLOP (shared-memory reads, promotion FFMAs):
#    the lever for the 1.11-1.21x gap to DeepGEMM's figures (PERF.md "Session 20", Next 1).
# 2. down (5120x25600) at M = 1 with K split 3 instead of 4: 34.75 / 35.11 vs 35.45 / 35.58 us in
#    one bench run (session 20 call 8; 1.14x its HBM floor). Does the b1 decode step agree?
source scripts/dev/call_prelude.sh
run_suites gpu_fused gpu_attention qwen3_gpu
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 50 > $R/smi.csv &
SMI=$!
BENCH_STAMPS=1 timeout 150 $BIN/bench --shapes 2048,4096,4096 4096,4096,4096 --columns ours,into,lt \
  --samples 25 > $R/bench-largem.txt 2> $R/stamps.txt
echo "bench large-M rc=$? at $(elapsed)"
kill $SMI; wait $SMI 2>/dev/null
# Mean SM clock / power over each timing window (from its STAMP to the next).
python3 - "$R/stamps.txt" "$R/smi.csv" <<'PY' | tee $R/clock-per-column.txt
import sys, datetime
st = [l.split() for l in open(sys.argv[1]) if l.startswith("STAMP")]
rows = []
for l in open(sys.argv[2]).readlines()[1:]:
    f = [x.strip() for x in l.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp() * 1000
        rows.append((t, float(f[1].split()[0]), float(f[2].split()[0])))
    except (ValueError, IndexError):
        pass
for i, s in enumerate(st):
    t0 = int(s[1]); t1 = int(st[i + 1][1]) if i + 1 < len(st) else t0 + 2000
    w = [r for r in rows if t0 + 100 <= r[0] <= t1]  # skip the first 100 ms (settling)
    if w:
        print(f"{s[2]:>16} {s[3]:>4} {s[4]:>5}: {sum(r[1] for r in w)/len(w):7.0f} MHz {sum(r[2] for r in w)/len(w):6.0f} W ({len(w)} samples)")
PY
OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "X=default CANDLE_FP8_SPLIT=5120x25600=3" "1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
pack_out s21call1
