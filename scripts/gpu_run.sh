#!/usr/bin/env bash
# Runs the candle-fp8 GPU bundle on the H200 machine (no cargo there), from the repo root:
#
#   bash bundle/gpu_run.sh [PHASE...]     PHASE: env test sanitize sanitize-fused bench anchors reliability decode
#                                         (default: env test sanitize bench anchors)
#
# Logs and JSON go to $OUT (default bundle/out), packed at the end into $OUT/logs.tgz next to
# summary.txt (PACK=0: leave them unpacked). Per-phase time limits (seconds) via
# TEST_TIMEOUT, SANITIZE_TIMEOUT, BENCH_TIMEOUT, ANCHORS_TIMEOUT; extra arguments via
# TEST_ARGS (libtest filter/flags), BENCH_ARGS, ANCHORS_ARGS.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"
mkdir -p "$OUT"
BIN="$HERE/bin"
PHASES=("$@")
[[ ${#PHASES[@]} -eq 0 ]] && PHASES=(env test sanitize bench anchors)

if [[ ! -x "$BIN/gpu" || "$HERE/fp8bin.tar.xz" -nt "$BIN/gpu" ]]; then
  rm -rf "$BIN" && mkdir -p "$BIN"
  tar -xJf "$HERE/fp8bin.tar.xz" -C "$BIN" || { echo "gpu_run: cannot unpack fp8bin.tar.xz"; exit 1; }
fi
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="/usr/local/cuda/bin:$PATH"
export RUST_BACKTRACE=1
SUMMARY="$OUT/summary.txt"
[[ -f "$HERE/MANIFEST.txt" ]] && cp "$HERE/MANIFEST.txt" "$OUT/MANIFEST.txt"

phase() {  # phase NAME TIMEOUT CMD... : run, log to $OUT/NAME.log, record the status
  local name="$1" limit="$2"; shift 2
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" | tee -a "$SUMMARY"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$SUMMARY"
  return $rc
}

test_counts() {  # sums libtest's "test result" lines of a log: "N passed, N failed"
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "%d passed, %d failed\n", p, f }' "$1"
}

SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)"
SMALL_FILTER="${SANITIZE_FILTER:-providers_match_reference_on_shape_grid activation_quantization_is_bit_exact repeated_calls_are_bitwise_identical}"

for p in "${PHASES[@]}"; do
  case "$p" in
    env)
      nvidia-smi >"$OUT/nvidia-smi.log" 2>&1
      phase check_env 60 "$BIN/check_env"
      ;;
    test)
      # shellcheck disable=SC2086
      phase test "${TEST_TIMEOUT:-540}" "$BIN/gpu" --nocapture --test-threads="${TEST_THREADS:-2}" ${TEST_ARGS:-}
      if [[ -x "$BIN/qwen3_gpu" ]]; then  # the model on CUDA (appended to the same log)
        timeout --kill-after=10 "${TEST_TIMEOUT:-540}" "$BIN/qwen3_gpu" --nocapture --test-threads=1 >>"$OUT/test.log" 2>&1
        echo "=== qwen3_gpu: rc=$?" | tee -a "$SUMMARY"
      fi
      if [[ -x "$BIN/gpu_attention" ]]; then  # the decode-attention kernels (same log)
        timeout --kill-after=10 "${TEST_TIMEOUT:-540}" "$BIN/gpu_attention" --nocapture --test-threads=1 >>"$OUT/test.log" 2>&1
        echo "=== gpu_attention: rc=$?" | tee -a "$SUMMARY"
      fi
      if [[ -x "$BIN/gpu_fused" ]]; then  # the fused elementwise + quantize kernels
        timeout --kill-after=10 "${TEST_TIMEOUT:-540}" "$BIN/gpu_fused" --nocapture --test-threads=1 >>"$OUT/test.log" 2>&1
        echo "=== gpu_fused: rc=$?" | tee -a "$SUMMARY"
      fi
      if [[ -x "$BIN/gpu_sampling" ]]; then  # the greedy-sampling argmax kernel
        timeout --kill-after=10 "${TEST_TIMEOUT:-540}" "$BIN/gpu_sampling" --nocapture --test-threads=1 >>"$OUT/test.log" 2>&1
        echo "=== gpu_sampling: rc=$?" | tee -a "$SUMMARY"
      fi
      grep -E "^(test |ok |SKIP|thread .* panicked)" "$OUT/test.log" | tail -n 60
      echo "tests: $(test_counts "$OUT/test.log")" | tee -a "$SUMMARY"
      ;;
    sanitize)
      if [[ -z "$SANITIZER" ]]; then
        echo "=== sanitize: compute-sanitizer not found" | tee -a "$SUMMARY"
        continue
      fi
      for tool in memcheck racecheck synccheck; do
        # shellcheck disable=SC2086
        phase "sanitize-$tool" "${SANITIZE_TIMEOUT:-280}" \
          env CANDLE_FP8_GPU_QUICK=1 "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
          "$BIN/gpu" --test-threads=1 $SMALL_FILTER
        echo "sanitize-$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-$tool.log" | tail -n 1); tests: $(test_counts "$OUT/sanitize-$tool.log")" | tee -a "$SUMMARY"
      done
      # Every schedule at its boundary shapes (tests/gpu_reliability.rs), our kernels only:
      # the three tools, appended to one log.
      for tool in memcheck racecheck synccheck; do
        # shellcheck disable=SC2086
        phase "boundary-$tool" "${SANITIZE_TIMEOUT:-280}" \
          env CANDLE_FP8_TEST_PROVIDERS="${BOUNDARY_PROVIDERS:-hopper}" "$SANITIZER" --tool "$tool" \
          --error-exitcode 99 --print-limit 20 "$BIN/gpu_reliability" --test-threads=1 --nocapture sanitizer_boundary_shapes
        echo "boundary-$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/boundary-$tool.log" | tail -n 1); tests: $(test_counts "$OUT/boundary-$tool.log")" | tee -a "$SUMMARY"
        cat "$OUT/boundary-$tool.log" >>"$OUT/sanitize-boundary.log" && rm -f "$OUT/boundary-$tool.log"
      done
      ;;
    sanitize-fused)
      # The decode kernels (kernels/fused_quant.cu, attention.cu, sampling.cu) under the three
      # tools: tests/gpu_fused.rs, gpu_attention.rs and gpu_sampling.rs, one log per binary.
      [[ -z "$SANITIZER" ]] && { echo "=== sanitize-fused: compute-sanitizer not found" | tee -a "$SUMMARY"; continue; }
      # gpu_attention's full grid (len 5000, batch 16) is slow under racecheck: its kernels'
      # every code path is covered by these three tests (ATTN_SANITIZE_FILTER= for all).
      ATTN_FILTER="${ATTN_SANITIZE_FILTER-splits_agree len1_quantizes qk_norm_rope_append_matches}"
      for t in gpu_fused gpu_attention gpu_sampling; do
        filter=""
        [[ $t == gpu_attention ]] && filter="$ATTN_FILTER"
        for tool in ${FUSED_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
          # shellcheck disable=SC2086
          phase "$t-$tool" "${SANITIZE_TIMEOUT:-280}" "$SANITIZER" --tool "$tool" --error-exitcode 99 \
            --print-limit 20 "$BIN/$t" --test-threads=1 --nocapture $filter
          # Summarise this tool's own log (a run cut by the time limit has no SUMMARY line).
          echo "$t-$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$t-$tool.log" | tail -n 1); tests: $(test_counts "$OUT/$t-$tool.log")" | tee -a "$SUMMARY"
          cat "$OUT/$t-$tool.log" >>"$OUT/sanitize-$t.log" && rm -f "$OUT/$t-$tool.log"
        done
      done
      ;;
    bench)
      # shellcheck disable=SC2086
      phase bench "${BENCH_TIMEOUT:-540}" "$BIN/bench" --json "$OUT/bench.json" ${BENCH_ARGS:-}
      ;;
    anchors)
      if [[ -f "$HERE/anchors.py" ]]; then
        # shellcheck disable=SC2086
        phase anchors "${ANCHORS_TIMEOUT:-540}" python3 "$HERE/anchors.py" --json "$OUT/anchors.json" ${ANCHORS_ARGS:-}
      else
        echo "=== anchors: anchors.py not in the bundle" | tee -a "$SUMMARY"
      fi
      ;;
    reliability)
      # shellcheck disable=SC2086
      phase reliability "${RELIABILITY_TIMEOUT:-300}" "$BIN/gpu_reliability" --nocapture --test-threads=1 ${RELIABILITY_ARGS:-}
      echo "reliability: $(test_counts "$OUT/reliability.log")" | tee -a "$SUMMARY"
      ;;
    decode)
      # Qwen3-32B architecture with random FP8 weights (timings meaningful, text not), prompt
      # of 100 tokens: fp8 and bf16 linears at batch 1 and 16; then the accuracy check.
      for lin in ${DECODE_LINEAR:-fp8 bf16}; do
        for b in ${DECODE_BATCH:-1 16}; do
          phase "decode-$lin-b$b" "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda \
            --random-weights "${DECODE_MODEL:-qwen3-32b}" --prompt-len 100 --max-new-tokens "${DECODE_TOKENS:-64}" \
            --ignore-eos --batch "$b" --linear "$lin" --json "$OUT/decode-$lin-b$b.json"
        done
      done
      phase decode-accuracy-tiny "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda --check-accuracy 256 \
        --max-new-tokens 8 --json "$OUT/decode-accuracy-tiny.json"
      [[ -n "${DECODE_ACCURACY_32B:-}" ]] && phase decode-accuracy-32b "${DECODE_TIMEOUT:-150}" "$BIN/decode" \
        --device cuda --random-weights qwen3-32b --check-accuracy "$DECODE_ACCURACY_32B" --prompt-len 100 \
        --max-new-tokens 8 --json "$OUT/decode-accuracy-32b.json"
      ;;
    *)
      echo "gpu_run: unknown phase $p (env test sanitize sanitize-fused bench anchors reliability decode)" | tee -a "$SUMMARY"
      ;;
  esac
done
echo "--- summary ($SUMMARY)"
cat "$SUMMARY"
# The device tool returns at most 8 files from $OUT: pack everything but the summary into one
# archive (PACK=0 keeps the files as they are).
if [[ "${PACK:-1}" == 1 ]]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tgz -printf '%f\n' \
     | tar -czf logs.tgz -T - && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tgz -delete)
  echo "--- packed into $OUT/logs.tgz (PACK=0 to keep separate files)"
fi
