#!/usr/bin/env bash
# Kernel timeline of decode steps on the H200 machine (repo root, bundle unpacked or not):
# runs `decode` under the CUPTI injection library bundle/tools/ktrace.so (dev/ktrace.c)
# and writes $OUT/trace-<tag>.csv (one line per kernel: start, end, grid, name). Analyse here
# with dev/ktrace_step.py.
#
#   bash dev/trace_decode.sh TAG [decode flags...]    e.g. TAG=b1 --batch 1
set -uo pipefail
TAG="${1:?tag}"; shift
OUT="${OUT:-bundle/out}"; mkdir -p "$OUT"
BIN="bundle/bin"
if [[ ! -x "$BIN/decode" || bundle/fp8bin.tar.xz -nt "$BIN/decode" ]]; then
  rm -rf "$BIN" && mkdir -p "$BIN" && tar -xJf bundle/fp8bin.tar.xz -C "$BIN"
fi
CUPTI_DIR=/tmp/ktrace-cupti
if [[ ! -f "$CUPTI_DIR/libcupti.so.13" ]]; then
  mkdir -p "$CUPTI_DIR" && xz -dc bundle/tools/libcupti.so.13.xz >"$CUPTI_DIR/libcupti.so.13"
fi
export LD_LIBRARY_PATH="$CUPTI_DIR:/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CUDA_INJECTION64_PATH="$PWD/bundle/tools/ktrace.so" KTRACE_OUT="$OUT/trace-$TAG.csv" \
  timeout "${TRACE_TIMEOUT:-120}" "$BIN/decode" --device cuda --random-weights "${DECODE_MODEL:-qwen3-32b}" \
  --prompt-len 100 --max-new-tokens "${DECODE_TOKENS:-12}" --ignore-eos "$@" >"$OUT/trace-$TAG.log" 2>&1
echo "trace_decode $TAG: rc=$? lines=$(wc -l <"$OUT/trace-$TAG.csv" 2>/dev/null)"
grep -E "^TPOT|^host enqueue" "$OUT/trace-$TAG.log"
