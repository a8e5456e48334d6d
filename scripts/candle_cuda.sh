#!/usr/bin/env bash
# Prepares <repo>/.candle-cuda/candle-core: a copy of the registry's candle-core 0.11.1 whose
# cudarc dependency *loads* libcuda/cuBLAS/cuBLASLt/cuRAND at run time ("dynamic-loading")
# for CUDA 13.0 ("cuda-13000"), instead of linking them at build time ("dynamic-linking" +
# "cuda-version-from-build-system"), which needs libcuda on the build machine.
#
#   bash scripts/candle_cuda.sh          # idempotent; prints the cargo flag to use
#
# Then build with:
#   cargo --config 'patch.crates-io.candle-core.path=".candle-cuda/candle-core"' build --features cuda
# (run from the repo root; the path is relative to the current directory). The patch rewrites
# candle-core's entry in Cargo.lock while it is in effect; scripts/bundle.sh restores it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=0.11.1
DEST="$ROOT/.candle-cuda/candle-core"
STAMP="$ROOT/.candle-cuda/.prepared-$VERSION"

CARGO_HOME_DIR="${CARGO_HOME:-$HOME/.cargo}"
# (`|| true`: on a fresh machine the registry does not exist yet and pipefail would end the script.)
find_src() { ls -d "$CARGO_HOME_DIR"/registry/src/*/candle-core-$VERSION 2>/dev/null | head -n 1 || true; }
SRC="$(find_src)"
if [[ -z "$SRC" ]]; then
  # Not unpacked yet: let cargo download the locked dependencies.
  (cd "$ROOT" && cargo fetch --locked >/dev/null)
  SRC="$(find_src)"
fi
[[ -n "$SRC" ]] || { echo "candle_cuda: candle-core-$VERSION not found under $CARGO_HOME_DIR/registry/src" >&2; exit 1; }

if [[ -f "$STAMP" && -f "$DEST/Cargo.toml" && "$(cat "$STAMP")" == "$SRC" ]]; then
  echo "candle_cuda: $DEST is ready"
else
  rm -rf "$DEST" "$STAMP"
  mkdir -p "$(dirname "$DEST")"
  cp -r "$SRC" "$DEST"
  chmod -R u+w "$DEST"
  # The registry's normalized Cargo.toml lists cudarc's features one per line.
  python3 - "$DEST/Cargo.toml" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
m = re.search(r'\[dependencies\.cudarc\]\n(.*?)(?=\n\[|\Z)', s, re.S)
assert m, "no [dependencies.cudarc] section in candle-core's Cargo.toml"
sec = m.group(1)
assert '"dynamic-linking"' in sec and '"cuda-version-from-build-system"' in sec, sec
new = sec.replace('"dynamic-linking"', '"dynamic-loading"').replace(
    '"cuda-version-from-build-system"', '"cuda-13000"')
s = s[:m.start(1)] + new + s[m.end(1):]
open(p, "w").write(s)
PY
  grep -q '"dynamic-loading"' "$DEST/Cargo.toml"
  echo "$SRC" >"$STAMP"
  echo "candle_cuda: prepared $DEST (cudarc: dynamic-loading, cuda-13000)"
fi
echo "# build with:"
echo "cargo --config 'patch.crates-io.candle-core.path=\".candle-cuda/candle-core\"' build --features cuda"
