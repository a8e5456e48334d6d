#!/usr/bin/env bash
# Per-kernel GPU time of one decode step (H200 machine, from the repo root, after gpu_run.sh has
# unpacked the bundle): ncu times every kernel that `decode --profile-step N` brackets with
# cuProfilerStart/Stop, then the kernels are summed by name. ncu serializes the launches (no
# PDL overlap, no launch gaps): sum of kernel times vs the measured TPOT = gaps + overhead.
#
#   bash dev/profile_decode.sh [BATCH] [extra decode flags...]   -> $OUT/profile-bB.{csv,txt}
set -uo pipefail
B="${1:-1}"; shift || true
OUT="${OUT:-bundle/out}"; mkdir -p "$OUT"
BIN="bundle/bin"
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
[[ -z "$NCU" ]] && { echo "profile_decode: ncu not found"; exit 1; }
timeout "${PROFILE_TIMEOUT:-240}" "$NCU" --profile-from-start off --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum --csv --print-units base --log-file "$OUT/profile-b$B.csv" \
  "$BIN/decode" --device cuda --random-weights "${DECODE_MODEL:-qwen3-32b}" --prompt-len 100 \
  --max-new-tokens 6 --ignore-eos --batch "$B" --warmup 1 --profile-step 4 "$@" >"$OUT/profile-b$B.log" 2>&1
echo "profile_decode: ncu rc=$?"
python3 - "$OUT/profile-b$B.csv" <<'PY' | tee "$OUT/profile-b$B.txt"
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: ns = float(r[vi].replace(",", ""))
    except ValueError: continue
    name = re.sub(r"^void ", "", r[ki])[:90]
    tot[name] += ns / 1e3; cnt[name] += 1
s = sum(tot.values())
print(f"{'kernel':90s} {'calls':>6s} {'us total':>10s} {'us/call':>8s} {'share':>6s}")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"{k:90s} {cnt[k]:6d} {v:10.1f} {v/cnt[k]:8.2f} {100*v/s:5.1f}%")
print(f"{'SUM (one decode step, serialized)':90s} {sum(cnt.values()):6d} {s:10.1f}")
PY
