#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler (nvcc + cudart + CCCL + NVVM + CRT) from NVIDIA's
# PyPI wheels into <repo>/.cuda (ignored by git), without root and without a system CUDA.
#
#   bash scripts/install_cuda.sh            # install (idempotent) and print the env
#   eval "$(bash scripts/install_cuda.sh --env)"   # install if needed, export the env
#
# Why 13.0.x: the H200 machine's driver is 580 (CUDA 13.0); a newer toolkit's PTX/cubins
# are refused by that driver. Why these five wheels: they are exactly what nvcc needs to
# compile and link sm_90a code (see docs/CUDA.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${CANDLE_FP8_CUDA_PREFIX:-$ROOT/.cuda}"
PKGS="$PREFIX/pkgs"
CUDA_HOME_DIR="$PKGS/nvidia/cu13"
STAMP="$PREFIX/.installed-13.0"

WHEELS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-cccl==13.0.85"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-crt==13.0.88"
)

ENV_ONLY=0
[[ "${1:-}" == "--env" ]] && ENV_ONLY=1
log() { if [[ $ENV_ONLY == 1 ]]; then echo "$*" >&2; else echo "$*"; fi; }

want="$(printf '%s\n' "${WHEELS[@]}")"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$CUDA_HOME_DIR/bin/nvcc" ]]; then
  log "install_cuda: CUDA 13.0 already installed in $CUDA_HOME_DIR"
else
  PY="${PYTHON:-$(command -v python3 || command -v python || true)}"
  if [[ -z "$PY" ]]; then
    echo "install_cuda: python3 (with pip) is required to fetch NVIDIA's CUDA wheels" >&2
    exit 1
  fi
  log "install_cuda: installing ${WHEELS[*]} into $PKGS"
  rm -rf "$PKGS" "$STAMP"
  mkdir -p "$PKGS"
  # --no-deps: the wheels' own dependency metadata pulls in nothing we need.
  "$PY" -m pip install --quiet --no-deps --no-compile --target "$PKGS" "${WHEELS[@]}" \
    >"$PREFIX/install.log" 2>&1 || { cat "$PREFIX/install.log" >&2; exit 1; }
  echo "$want" >"$STAMP"
fi

# Layout fix-ups nvcc and linkers expect from a system install (idempotent).
[[ -e "$CUDA_HOME_DIR/lib64" ]] || ln -s lib "$CUDA_HOME_DIR/lib64"
# `-lcudart` (candle-kernels links cudart dynamically) needs the unversioned name.
if [[ -e "$CUDA_HOME_DIR/lib/libcudart.so.13" && ! -e "$CUDA_HOME_DIR/lib/libcudart.so" ]]; then
  ln -s libcudart.so.13 "$CUDA_HOME_DIR/lib/libcudart.so"
fi
chmod +x "$CUDA_HOME_DIR"/bin/* "$CUDA_HOME_DIR"/nvvm/bin/* 2>/dev/null || true

"$CUDA_HOME_DIR/bin/nvcc" --version >/dev/null 2>&1 || {
  echo "install_cuda: $CUDA_HOME_DIR/bin/nvcc does not run" >&2; exit 1; }

ENV_LINES=(
  "export CUDA_HOME=\"$CUDA_HOME_DIR\""
  "export CUDA_PATH=\"$CUDA_HOME_DIR\""
  "export PATH=\"$CUDA_HOME_DIR/bin:\$PATH\""
  "export CUDA_COMPUTE_CAP=90"
  "export LIBRARY_PATH=\"$CUDA_HOME_DIR/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}\""
)
if [[ $ENV_ONLY == 1 ]]; then
  printf '%s\n' "${ENV_LINES[@]}"
else
  echo "install_cuda: $("$CUDA_HOME_DIR/bin/nvcc" --version | tail -n 2 | head -n 1)"
  echo "# export this environment (or: eval \"\$(bash scripts/install_cuda.sh --env)\"):"
  printf '%s\n' "${ENV_LINES[@]}"
fi
