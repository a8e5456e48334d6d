#!/usr/bin/env bash
# Decode TPOT under several environment settings, one process each (H200 machine, repo root,
# after scripts/gpu_run.sh has unpacked the bundle). For A/B-ing runtime knobs or builds:
#
#   bash dev/decode_sweep.sh "FP8GEMM_L2_WARM_MB=0 FP8GEMM_L2_WARM_MB=24" [BATCHES]
#
# Each setting runs `decode --random-weights qwen3-32b --prompt-len 100` for every batch in
# BATCHES (default "1 16"), REPEAT times (default 1), logs to $OUT/sweep-<setting>-b<B>.log,
# and prints one table row per run: setting, batch, TPOT mean/p50, TTFT, host enqueue per step.
# The first decode process on a fresh machine runs ~10 % slow: WARMUP=1 (default) runs one first.
# A setting DECODE_BIN=path runs that decode binary instead of bundle/bin/decode (old vs new build);
# A=1,B=2 sets several variables.
set -uo pipefail
SETTINGS="${1:?settings}"; BATCHES="${2:-1 16}"
OUT="${OUT:-bundle/out}"; mkdir -p "$OUT"
BIN="bundle/bin"
if [[ ! -x "$BIN/decode" || bundle/fp8bin.tar.xz -nt "$BIN/decode" ]]; then
  rm -rf "$BIN" && mkdir -p "$BIN" && tar -xJf bundle/fp8bin.tar.xz -C "$BIN"
fi
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ROWS="$OUT/sweep-table.txt"
if [[ "${WARMUP:-1}" == 1 ]]; then
  timeout 120 "$BIN/decode" --device cuda --random-weights "${DECODE_MODEL:-qwen3-32b}" --prompt-len 100 \
    --max-new-tokens 16 --ignore-eos >"$OUT/sweep-warmup.log" 2>&1
fi
printf '%-28s %5s %10s %10s %9s %9s\n' setting batch "TPOT mean" "TPOT p50" TTFT enqueue | tee -a "$ROWS"
for r in $(seq "${REPEAT:-1}"); do
  for s in $SETTINGS; do
    for b in $BATCHES; do
      log="$OUT/sweep-${s//[^A-Za-z0-9_.-]/_}-b$b-r$r.log"
      bin="$BIN/decode"; [[ $s == DECODE_BIN=* ]] && bin="${s#DECODE_BIN=}"  # A/B of two builds
      env ${s//,/ } timeout "${DECODE_TIMEOUT:-120}" "$bin" --device cuda --random-weights \
        "${DECODE_MODEL:-qwen3-32b}" --prompt-len 100 --max-new-tokens "${DECODE_TOKENS:-48}" \
        --ignore-eos --batch "$b" ${DECODE_ARGS:-} >"$log" 2>&1
      rc=$?
      tpot=$(sed -n 's/^TPOT *mean \([0-9.]*\) ms, p50 \([0-9.]*\) ms.*/\1 \2/p' "$log")
      ttft=$(sed -n 's/^TTFT *\([0-9.]*\) ms.*/\1/p' "$log")
      enq=$(sed -n 's/^host enqueue *mean \([0-9.]*\) ms.*/\1/p' "$log")
      [[ $rc -ne 0 || -z "$tpot" ]] && tpot="rc=$rc -"
      printf '%-28s %5s %10s %10s %9s %9s\n' "$s" "$b" $tpot "${ttft:--}" "${enq:--}" | tee -a "$ROWS"
    done
  done
done
