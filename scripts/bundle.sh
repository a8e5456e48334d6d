#!/usr/bin/env bash
# Builds the CUDA binaries here (no GPU needed) and packs them for the GPU machine, which has
# no cargo: stripped release builds (feature `nccl`: the CUDA path and tensor parallelism) of every
# GPU test binary scripts/gpu_run.sh runs (tests/gpu.rs, gpu_reliability.rs, gpu_fused.rs,
# gpu_attention.rs, gpu_prefill.rs, gpu_sampling.rs, gpu_grouped.rs, models_gpu.rs, gpu_tp.rs),
# examples/check_env.rs, bench.rs, decode.rs and eval.rs, with the dynamic-loading candle-core (scripts/candle_cuda.sh) and the pinned CUDA 13.0 compiler
# (scripts/install_cuda.sh).
#
#   bash scripts/bundle.sh            # from the repo root (any worktree)
#   -> bundle/fp8bin.tar.xz bundle/gpu_run.sh bundle/anchors.py bundle/MANIFEST.txt
#
# On the GPU machine (repo root): bash bundle/gpu_run.sh [PHASE...] (see its header; the default
# runs env test reliability sanitize bench anchors)
#
# Env: CARGO_TARGET_DIR (default <repo>/target/cuda), BUNDLE_DIR (default <repo>/bundle),
#      ANCHORS (default /work/shared/peers/anchors.py, else ../shared/peers/anchors.py).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUNDLE="${BUNDLE_DIR:-$ROOT/bundle}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/cuda}"
MAX_MB=60

# Describe the source before cargo's [patch] touches Cargo.lock.
SRC_DESC="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+dirty') ($(git rev-parse --abbrev-ref HEAD 2>/dev/null))"

eval "$(bash scripts/install_cuda.sh --env)"
bash scripts/candle_cuda.sh >/dev/null

# The [patch] rewrites candle-core's Cargo.lock entry while it is active: keep the
# committed lock file as it was.
mkdir -p "$CARGO_TARGET_DIR"
cp Cargo.lock "$CARGO_TARGET_DIR/Cargo.lock.orig"
trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.orig" Cargo.lock' EXIT

CARGO=(cargo --config 'patch.crates-io.candle-core.path=".candle-cuda/candle-core"')
EXAMPLES=(--example check_env --example bench --example decode --example eval)

t0=$(date +%s)
echo "bundle: building (target dir $CARGO_TARGET_DIR)"
"${CARGO[@]}" build --release --features nccl "${EXAMPLES[@]}"
# The test binaries' paths have a hash: ask cargo for them.
# Every test binary gpu_run.sh runs (its `test` and `reliability` phases).
GPU_TESTS=(gpu gpu_reliability gpu_fused gpu_attention gpu_prefill gpu_sampling gpu_grouped models_gpu gpu_tp)
"${CARGO[@]}" test --release --features nccl "${GPU_TESTS[@]/#/--test=}" --no-run --message-format=json \
  >"$CARGO_TARGET_DIR/gpu-test-build.json"
test_exe() {  # test_exe NAME: the executable cargo built for tests/NAME.rs
  python3 scripts/test_exe.py "$CARGO_TARGET_DIR/gpu-test-build.json" "$1"
}
t1=$(date +%s)
echo "bundle: build took $((t1 - t0)) s"

STAGE="$(mktemp -d)"
trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.orig" Cargo.lock; rm -rf "$STAGE"' EXIT
for t in "${GPU_TESTS[@]}"; do
  exe="$(test_exe "$t")"
  [[ -n "$exe" && -x "$exe" ]] || { echo "bundle: could not find the tests/$t.rs binary" >&2; exit 1; }
  cp "$exe" "$STAGE/$t"
done
for ex in check_env bench decode eval; do
  [[ -x "$CARGO_TARGET_DIR/release/examples/$ex" ]] || { echo "bundle: examples/$ex.rs was not built" >&2; exit 1; }
  cp "$CARGO_TARGET_DIR/release/examples/$ex" "$STAGE/$ex"
done
strip "$STAGE"/*

mkdir -p "$BUNDLE"
# Only what ships: drop an unpacked bin/ or out/ left by a local gpu_run.sh.
rm -rf "$BUNDLE/fp8bin.tar.xz" "$BUNDLE/bin" "$BUNDLE/out"
# The binaries share most of their bytes (candle, the kernels' cubins): a dictionary larger than
# one binary lets xz store the shared parts once (~12 MB instead of ~60 MB for nine binaries;
# ~2.5 GB of memory to compress, 256 MB to unpack).
tar -C "$STAGE" -cf - . | xz -T0 --lzma2=preset=6,dict=256MiB >"$BUNDLE/fp8bin.tar.xz"
cp scripts/gpu_run.sh "$BUNDLE/gpu_run.sh"
ANCHORS="${ANCHORS:-}"
if [[ -z "$ANCHORS" ]]; then
  for cand in /work/shared/peers/anchors.py "$ROOT/../shared/peers/anchors.py"; do
    [[ -f "$cand" ]] && { ANCHORS="$cand"; break; }
  done
fi
if [[ -n "$ANCHORS" && -f "$ANCHORS" ]]; then
  install -m 0644 "$ANCHORS" "$BUNDLE/anchors.py"
  # DeepGEMM's peer script sits next to anchors.py (it imports it); the `grouped` phase runs it
  # where DEEPGEMM_DIR names a DeepGEMM tree on the GPU machine.
  DG="$(dirname "$ANCHORS")/deepgemm.py"
  [[ -f "$DG" ]] && install -m 0644 "$DG" "$BUNDLE/deepgemm.py"
else
  echo "bundle: warning: anchors.py not found; the anchors phase will be skipped" >&2
fi
{
  echo "candle-fp8 GPU bundle"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $SRC_DESC"
  echo "nvcc: $(nvcc --version | grep release)"
  echo "kernels/: $(find kernels -type f | sort | xargs sha256sum | sha256sum | cut -c1-16) ($(find kernels -name '*.cu' | wc -l) .cu files; untracked: $(git status --porcelain --untracked-files=all kernels 2>/dev/null | wc -l))"
  echo "binaries (stripped):"
  (cd "$STAGE" && ls -l | tail -n +2 | awk '{printf "  %-16s %8.1f MB\n", $9, $5/1048576}')
  (cd "$STAGE" && sha256sum *) | sed 's/^/  /'
} >"$BUNDLE/MANIFEST.txt"
cat "$BUNDLE/MANIFEST.txt"
# What ships (other files a caller keeps in the folder are not the bundle).
size_mb=$(du -cm "$BUNDLE"/fp8bin.tar.xz "$BUNDLE"/gpu_run.sh "$BUNDLE"/MANIFEST.txt $(ls "$BUNDLE"/anchors.py "$BUNDLE"/deepgemm.py 2>/dev/null) | tail -n 1 | cut -f1)
echo "bundle: $BUNDLE is ${size_mb} MB (limit ${MAX_MB} MB); run on the GPU machine with:"
echo "  bash bundle/gpu_run.sh            # default phases: env test reliability sanitize bench anchors"
if (( size_mb >= MAX_MB )); then
  echo "bundle: ERROR: bundle is ${size_mb} MB >= ${MAX_MB} MB" >&2
  exit 1
fi
