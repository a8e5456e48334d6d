#!/usr/bin/env bash
# Builds the standalone check of kernels/fused/fused_quant.cu (dev/fused_check.cu) into OUTDIR:
# the executable and cubins of candle-kernels' reduce/unary/binary sources (the reference).
#   bash dev/fused_check.sh OUTDIR             # here, with the pinned nvcc
#   OUTDIR/fused_check OUTDIR                  # on the GPU: prints ALL BIT-IDENTICAL, exit 0
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:?usage: fused_check.sh OUTDIR}" && cd "$1" && pwd)"
eval "$(bash "$ROOT/scripts/install_cuda.sh" --env)" >/dev/null
CK="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/candle-kernels-0.11.1/src | head -n 1)"
ARCH=-gencode=arch=compute_90a,code=sm_90a
FLAGS=(-std=c++17 -O3 --expt-relaxed-constexpr -I"$ROOT/kernels/include" -I"$ROOT/kernels")
for f in reduce unary binary; do  # device-only compile (candle's headers do not build for the host pass)
  nvcc -cubin "$ARCH" -std=c++17 -O3 --expt-relaxed-constexpr -I"$CK" "$CK/$f.cu" -o "$OUT/ck_$f.cubin" &
done
nvcc "$ARCH" "${FLAGS[@]}" -c "$ROOT/kernels/fused/fused_quant.cu" -o "$OUT/fused_quant.o" &
nvcc "$ARCH" "${FLAGS[@]}" -c "$ROOT/kernels/gemm/quant.cu" -o "$OUT/quant.o" &
nvcc "$ARCH" "${FLAGS[@]}" -c "$ROOT/dev/fused_check.cu" -o "$OUT/fused_check.o" &
wait
for f in ck_reduce.cubin ck_unary.cubin ck_binary.cubin fused_quant.o quant.o fused_check.o; do
  [[ -s "$OUT/$f" ]] || { echo "fused_check: building $f failed" >&2; exit 1; }
done
nvcc "$ARCH" "$OUT/fused_check.o" "$OUT/fused_quant.o" "$OUT/quant.o" -cudart static -o "$OUT/fused_check"
echo "built $OUT/fused_check (run: $OUT/fused_check $OUT)"
