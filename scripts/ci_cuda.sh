#!/usr/bin/env bash
# CI: the CUDA path must keep compiling on a machine without a GPU or a system CUDA (called by
# .ci/run). Installs the pinned CUDA 13.0 compiler (scripts/install_cuda.sh), prepares the
# dynamic-loading candle-core (scripts/candle_cuda.sh), builds every target with
# `--features nccl` (the CUDA path and tensor parallelism over NCCL) and runs the tests. Without
# a GPU every GPU test reports `SKIP <test>: <reason>` on stderr and passes: expected here, and
# counted below so that the skips stay visible (on the GPU machine, scripts/gpu_run.sh turns each
# into a failure).
# Cargo.lock is restored afterwards (the [patch] rewrites candle-core's entry).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/install_cuda.sh --env)"
bash scripts/candle_cuda.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/cuda}"
mkdir -p "$CARGO_TARGET_DIR"
cp Cargo.lock "$CARGO_TARGET_DIR/Cargo.lock.orig"
trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.orig" Cargo.lock' EXIT
# Skips are not failures here (no GPU), whatever the calling environment says.
unset CANDLE_FP8_REQUIRE_GPU

CARGO=(cargo --config 'patch.crates-io.candle-core.path=".candle-cuda/candle-core"')
echo "== cargo build --release --features nccl --all-targets"
"${CARGO[@]}" build --release --features nccl --all-targets
echo "== cargo test --release --features nccl"
LOG="$CARGO_TARGET_DIR/ci-cuda-test.log"
set +e
"${CARGO[@]}" test --release --features nccl 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
# A skip is reported as `SKIP <test>[ [part]]: <reason>` (tests/common/gpu.rs), on stderr: it can
# share a line with libtest's output, so it is counted wherever it starts.
SKIP_RE='SKIP [A-Za-z0-9_/]+( \[[^]]*\])?: '
skips=$(grep -oE "$SKIP_RE" "$LOG" | wc -l)
passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed/) p += $i } END { print p + 0 }' "$LOG")
echo "== cuda-feature tests: rc=$rc, $passed passed, $skips skipped (GPU tests without a GPU: expected here)"
grep -oE "${SKIP_RE}.*" "$LOG" | sed 's/^/   /' | head -n 200
exit "$rc"
