#!/usr/bin/env bash
# CI: the CUDA path must keep compiling on a machine without a GPU or a system CUDA (called by
# .ci/run). Installs the pinned CUDA 13.0 compiler (scripts/install_cuda.sh), prepares the
# dynamic-loading candle-core (scripts/candle_cuda.sh), builds every target with
# `--features cuda` and runs the tests (GPU tests print SKIP and pass without a device).
# Cargo.lock is restored afterwards (the [patch] rewrites candle-core's entry).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/install_cuda.sh --env)"
bash scripts/candle_cuda.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/cuda}"
mkdir -p "$CARGO_TARGET_DIR"
cp Cargo.lock "$CARGO_TARGET_DIR/Cargo.lock.orig"
trap 'cp "$CARGO_TARGET_DIR/Cargo.lock.orig" Cargo.lock' EXIT

CARGO=(cargo --config 'patch.crates-io.candle-core.path=".candle-cuda/candle-core"')
echo "== cargo build --release --features cuda --all-targets"
"${CARGO[@]}" build --release --features cuda --all-targets
echo "== cargo test --release --features cuda"
"${CARGO[@]}" test --release --features cuda
