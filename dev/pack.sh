#!/bin/bash
# Packs binaries of a CUDA build (scripts/bundle.sh, CARGO_TARGET_DIR) into bundle/dev/*.xz,
# stripped, for a device call that carries only bundle/dev (the scripts there unpack them):
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh decode bench gpu_sampling ...
# Names are examples (release/examples/NAME) or GPU test suites (tests/NAME.rs); NAME=SUFFIX
# packs NAME as NAME_SUFFIX (two builds side by side, e.g. decode=old).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="${CARGO_TARGET_DIR:-$ROOT/target/cuda}"
DST="$ROOT/bundle/dev"
mkdir -p "$DST"
for spec in "$@"; do
  name=${spec%%=*}; out=$name; [[ $spec == *=* ]] && out="${name}_${spec#*=}"
  src="$T/release/examples/$name"
  if [[ ! -x $src ]]; then
    src=$(python3 "$ROOT/scripts/test_exe.py" "$T/gpu-test-build.json" "$name")
  fi
  [[ -n $src && -x $src ]] || { echo "pack: no binary for $name" >&2; exit 1; }
  strip -o "$DST/$out" "$src" && xz -T0 -f -6 "$DST/$out"
  echo "pack: $out <- $src ($(du -h "$DST/$out.xz" | cut -f1))"
done
