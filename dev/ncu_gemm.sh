#!/usr/bin/env bash
# ncu of one GEMM launch of ours and of cuBLASLt blockwise on the same shape, through the dev
# harness (on a Hopper machine, from the repo root, libfp8gemm.so built by dev/build_lib.sh).
# Shapes with M*N*K >= 2^36 skip the harness's torch f32 reference, so the only GEMM kernels
# in the run are ours and cuBLASLt's.
#
#   bash dev/ncu_gemm.sh TAG M,N,K CONFIG   -> $OUT/ncu-TAG-{ours,cublas}-details.txt, -src-top.txt
#
# CONFIG as the harness names it (e.g. swap_ab8x64s8k2). OURS_ONLY=1 skips cuBLASLt.
set -uo pipefail
TAG="${1:?tag}"; SHAPE="${2:?M,N,K}"; CONFIG="${3:?config}"
OUT="${OUT:-out}"; mkdir -p "$OUT"
NCU="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
[[ -z "$NCU" ]] && { echo "ncu_gemm: ncu not found"; exit 1; }
run() {  # run NAME KERNEL-REGEX
  local name="$1" re="$2"
  timeout 150 "$NCU" --set full --import-source no -k "regex:$re" --launch-skip 1 --launch-count 1 \
    -f -o "$OUT/ncu-$TAG-$name" python3 dev/harness.py --lib ./libfp8gemm.so bench --only "$CONFIG" \
    --shapes "$SHAPE" >"$OUT/ncu-$TAG-$name.log" 2>&1
  echo "ncu_gemm $TAG $name: rc=$?"
  "$NCU" -i "$OUT/ncu-$TAG-$name.ncu-rep" --page details >"$OUT/ncu-$TAG-$name-details.txt" 2>&1
  "$NCU" -i "$OUT/ncu-$TAG-$name.ncu-rep" --page source --print-source sass --csv \
    >"$OUT/ncu-$TAG-$name-src.csv" 2>&1
  python3 - "$OUT/ncu-$TAG-$name-src.csv" >"$OUT/ncu-$TAG-$name-src-top.txt" 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if "Source" in r), None)
if hdr is None:
    print("no source table"); sys.exit()
h = rows[hdr]; body = rows[hdr + 1:]
col = lambda name: next((i for i, c in enumerate(h) if c.startswith(name)), None)
si, ss, sn = col("Source"), col("Warp Stall Sampling (All"), col("Warp Stall Sampling (Not")
ex = col("Instructions Executed")
num = lambda r, i: float(r[i].replace(",", "")) if i is not None and i < len(r) and r[i] not in ("", "-") else 0.0
tot = sum(num(r, ss) for r in body) or 1
print("columns:", "|".join(h))
print(f"total stall samples {tot:.0f}")
for k, r in enumerate(sorted(body, key=lambda r: -num(r, ss))[:40]):
    print(f"{100 * num(r, ss) / tot:5.1f}% notissued {num(r, sn):7.0f} exec {num(r, ex):9.0f}  {r[si][:110]}")
PY
  rm -f "$OUT/ncu-$TAG-$name-src.csv"
}
run ours 'sm90_fp8_gemm_1d2d'
[[ -n "${OURS_ONLY:-}" ]] || run cublas '^(?!sm90_fp8_gemm_1d2d).*(gemm|nvjet|xmma|cutlass).*'
grep -E "Duration|Registers Per|Shared Memory Config|Dynamic Shared|Block Size|Grid Size|SM Frequency|Compute \(SM\) Th|Memory Throughput|L1/TEX Cache Th|L2 Cache Th|Executed Ipc A|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued" \
  "$OUT"/ncu-"$TAG"-*-details.txt
