#!/bin/bash
# Session 21, call 1 (prepared in session 20 as docs/perf/next-s21/s21call1.sh, plus 3 and 4).
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench decode gpu_fused gpu_attention qwen3_gpu &&
#   cp docs/perf/2026-12-02-s21/s21call1.sh bundle/dev/
# Run: bash bundle/dev/s21call1.sh with carry ["bundle/dev"].
#
# 0. The fused-kernel suites on the current GEMM body (session 20 moved the stage release into a
#    lambda; gpu and forced_splits ran on it, these three last ran on the build before).
# 1. Large M under the power cap: SM clock and power next to each timing (ours, ours into, our
#    cuBLASLt provider) at 2048 / 4096 x 4096².
# 2. down (5120x25600) at M = 1 with K split 3 instead of 4 in the b1 decode step (three
#    interleaved pairs; alone: 34.75 / 35.11 vs 35.45 / 35.58 us, session 20 call 8).
# 3. DeepGEMM launches its persistent grid on ceil(tiles / waves) SMs ("less GPU frequency drop"):
#    our persistent schedule on 128 SMs (4096²: 512 tiles of 256 x 128 = 4 waves either way)
#    vs all 132, two interleaved rounds. Prediction: within 1 %.
# 4. Sweep of every compiled config x split at the 16-token decode shapes (and q|k|v at 32): the
#    16-token tile with 7 stages fits three CTAs per SM, so a K split of 2 (q|k|v: 320 CTAs)
#    fits in one wave as at M <= 8 (14.8 us there vs 18.3 at M = 16).
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
for r in 1 2; do
  for g in 128 0; do
    timeout 100 $BIN/bench --shapes 512,4096,4096 2048,4096,4096 4096,4096,4096 8192,4096,4096 \
      --columns into --grid-sms $g --samples 15 > $R/bench-grid$g-r$r.txt 2>&1
    echo "grid-sms $g round $r rc=$? at $(elapsed)"
    grep "^square\|^shape" $R/bench-grid$g-r$r.txt
  done
done
timeout 200 $BIN/bench --sweep --settle-ms 100 --samples 15 --shapes 16,10240,5120 16,5120,8192 \
  16,5120,25600 32,10240,5120 > $R/sweep-decode16.txt 2>&1
echo "sweep rc=$? at $(elapsed)"
grep "SWEEP-BEST\|kind=2 16x64" $R/sweep-decode16.txt | head -60
OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "X=default CANDLE_FP8_SPLIT=5120x25600=3" "1" > $R/decode.txt 2>&1
cat $R/dec/sweep-table.txt
echo "done at $(elapsed)"
pack_out s21call1
