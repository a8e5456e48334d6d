#!/usr/bin/env bash
# Reproduces the fuzz runs of docs/RELIABILITY.md.
#
#   scripts/fuzz.sh                       # every target, SECONDS_PER_TARGET each (default 1800)
#   scripts/fuzz.sh quant_config 600      # one target, 600 s
#   RUNS=10000000 scripts/fuzz.sh safetensors_header   # stop after exactly 10 M executions
#   JOBS=2 scripts/fuzz.sh ...            # libFuzzer -fork=JOBS (parallel workers)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain. Builds with
# AddressSanitizer and debug assertions (overflow checks) on, like `cargo fuzz build -a`.
# New interesting inputs go to fuzz/work/<target> (git-ignored), seeded from the committed
# corpus fuzz/corpus/<target>; crashes land in fuzz/artifacts/<target>. libFuzzer's final
# stats (`stat::number_of_executed_units`) and the log go to fuzz/work/<target>.log.
# CI does not run this (too long); it replays the committed seeds through the same target
# logic in `cargo test --test bad_input`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGETS=(quant_config safetensors_header checkpoint_open)
if [[ $# -ge 1 ]]; then TARGETS=("$1"); fi
SECS="${2:-${SECONDS_PER_TARGET:-1800}}"
TOOLCHAIN="${FUZZ_TOOLCHAIN:-+nightly}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/fuzz"

dict_for() {
  case "$1" in
    quant_config) echo fuzz/dicts/config.dict ;;
    *) echo fuzz/dicts/safetensors.dict ;;
  esac
}

cargo $TOOLCHAIN fuzz build -a --target-dir "$TARGET_DIR"
for t in "${TARGETS[@]}"; do
  work="fuzz/work/$t"
  mkdir -p "$work" "fuzz/artifacts/$t"
  args=(-max_total_time="$SECS" -dict="$(dict_for "$t")" -print_final_stats=1 -max_len=4096 -rss_limit_mb=4096 -timeout=10)
  if [[ -n "${RUNS:-}" ]]; then args+=(-runs="$RUNS"); fi
  if [[ -n "${JOBS:-}" ]]; then args+=(-fork="$JOBS"); fi
  echo "== $t: ${args[*]}"
  # The binary is run directly (not `cargo fuzz run`) so that no rebuild happens between targets.
  "$TARGET_DIR/x86_64-unknown-linux-gnu/release/$t" "${args[@]}" \
    -artifact_prefix="fuzz/artifacts/$t/" "$work" "fuzz/corpus/$t" 2>&1 | tee "$work.log" | grep -E "^(#[0-9]+ +(DONE|INITED)|stat::|==[0-9]+==ERROR|SUMMARY|Done)" || true
  echo "-- $t: $(grep -E "stat::number_of_executed_units" "$work.log" | tail -1); crashes: $(ls "fuzz/artifacts/$t" | wc -l)"
done
