#!/bin/bash
# Shared prelude of a device-call script (docs/perf/*/sNcallM.sh, run on the H200 as
# `bash bundle/dev/sNcallM.sh` with bundle/dev carried). Source it first:
#
#   source scripts/dev/call_prelude.sh
#   run_suites gpu gpu_fused qwen3_gpu:CANDLE_FP8_PREFILL_WINDOW=2
#   OUT=$R/dec REPEAT=3 bash scripts/dev/decode_sweep.sh "X=1 A=0" "1 16" > $R/decode.txt 2>&1
#   cat $R/dec/sweep-table.txt
#   pack_out s17call1
#
# It sets LD_LIBRARY_PATH, R (= $OUT/r, the folder that comes back), BIN (the unpacked binaries:
# every bundle/dev/NAME.xz becomes $BIN/NAME) and T0, and prints the GPU's serial, clock and power.
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
R="${OUT:?set OUT to the output folder of the device tool}/r"
BIN="$PWD/bundle/bin"
T0=$(date +%s)
mkdir -p "$R" "$BIN"
nvidia-smi --query-gpu=serial,clocks.sm,power.draw --format=csv,noheader
for f in bundle/dev/*.xz; do
  [[ -e $f ]] || continue
  xz -dc "$f" > "$BIN/$(basename "$f" .xz)"
done
chmod +x "$BIN"/* 2>/dev/null || true

# Seconds since the prelude ran.
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

# GPU test suites, one line each: NAME, or NAME:VAR=VALUE[,VAR=VALUE] to run it with those
# variables set. Logs in $R/test-NAME[-VALUES].txt; the first SKIP/FAILED/panicked lines after.
run_suites() {
  local spec t vars log
  for spec in "$@"; do
    t=${spec%%:*}; vars=""; [[ $spec == *:* ]] && vars=${spec#*:}
    log="$R/test-$t${vars:+-${vars//[^A-Za-z0-9_.-]/_}}.txt"
    env ${vars//,/ } timeout "${SUITE_TIMEOUT:-200}" "$BIN/$t" --test-threads=1 > "$log" 2>&1
    echo "$t ${vars} rc=$? $(grep '^test result' "$log") at $(elapsed)"
  done
  grep -h "SKIP\|FAILED\|panicked" "$R"/test-*.txt | head -5
}


# The stream-K / fix-up checks of a kernel change on one build: gpu_reliability's forced_splits,
# dev_variants and sanitizer_boundary_shapes, then synccheck of forced_splits (our kernels only).
# reliability_checks [NAME] runs $BIN/NAME (default gpu_reliability); logs $R/test-rel.txt,
# $R/synccheck.txt.
reliability_checks() {
  local bin="$BIN/${1:-gpu_reliability}"
  timeout 300 "$bin" forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > "$R/test-rel.txt" 2>&1
  echo "forced_splits + dev_variants + sanitizer_boundary rc=$? $(grep '^test result' "$R/test-rel.txt") at $(elapsed)"
  grep -h "SKIP\|FAILED\|panicked" "$R/test-rel.txt" | head -5
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout 100 compute-sanitizer --tool synccheck --error-exitcode 9 \
    "$bin" forced_splits --test-threads=1 > "$R/synccheck.txt" 2>&1
  echo "synccheck rc=$? $(grep -h 'ERROR SUMMARY' "$R/synccheck.txt") at $(elapsed)"
}

# The GEMM checks after a kernel change: gpu, reliability_checks (above), then racecheck of
# dev_variants (timeout RACE_TIMEOUT, default 200 s); logs in $R (test-gpu.txt, test-rel.txt,
# synccheck.txt, racecheck.txt).
gemm_checks() {
  run_suites gpu
  reliability_checks
  CANDLE_FP8_TEST_PROVIDERS=hopper timeout "${RACE_TIMEOUT:-200}" compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$BIN/gpu_reliability" dev_variants --test-threads=1 > "$R/racecheck.txt" 2>&1
  echo "racecheck dev_variants rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' "$R/racecheck.txt" | sort | uniq -c | tr '\n' ' ') at $(elapsed)"
}

# The same-run table of the Speed issue: anchors.py (torch's cuBLASLt, Triton; bundle/dev/anchors.py)
# then bench (ours into / op, our cuBLASLt provider, candle bf16) on this machine, merged by
# scripts/perf_table.py into $R/final-table.md (README's excerpt: the same with --readme).
same_run_table() {
  timeout 300 python3 bundle/dev/anchors.py --json "$R/anchors.json" --no-ceilings > "$R/anchors.log" 2>&1
  echo "anchors rc=$? at $(elapsed)"
  BENCH_STAMPS=1 timeout 220 "$BIN/bench" --json "$R/bench.json" --full-linear-max-m 1 > "$R/bench.log" 2>&1
  echo "bench rc=$? at $(elapsed)"
  python3 scripts/perf_table.py "$R/bench.json" "$R/anchors.log" > "$R/final-table.md" 2>&1
  tail -1 "$R/final-table.md"
}

# Archives $R as $OUT/NAME.tgz (what the device tool brings back) and removes it.
pack_out() { (cd "$OUT" && tar czf "$1.tgz" r && rm -rf r && echo "packed at $(elapsed)"); }

# Interleaved A/B of `bench --config` runs on one shape: config_ab TAG SHAPE CONFIG... ("-" = the
# dispatched config), two rounds; logs $R/ab-TAG-CONFIG-rN.txt; one line per run with the op and
# "into" medians (hot, cold) and any error line.
config_ab() {
  local tag=$1 shape=$2 r c a f; shift 2
  for r in 1 2; do
    for c in "$@"; do
      a=""; [[ $c != - ]] && a="--config $c"
      f=$R/ab-$tag-$c-r$r.txt
      timeout 60 "$BIN/bench" --shapes "$shape" --columns ours,into $a > "$f" 2>&1
      echo "$tag $c r$r rc=$? $(grep -E '^ *m=[0-9]+ *(hot|cold)' "$f" | awk '{printf "%s op %s into %s | ", $2, $4, $6}') $(grep -iE 'relerr|wrong|error|mismatch' "$f" | head -2)"
    done
  done
}

# Interleaved A/B of bench runs: bench_ab ROUNDS VARIANT=FLAGS... -- BENCH_ARGS...; each round
# runs every variant once (bench BENCH_ARGS FLAGS > $R/bench-VARIANT-rN.txt; FLAGS may be empty,
# words joined by ','). VARIANT@NAME runs $BIN/NAME instead of $BIN/bench (two builds, e.g.
# new= old@bench_old=). Files named {VARIANT} in BENCH_ARGS become that variant's round
# (--json $R/{VARIANT}.json). Prints scripts/dev/ab_table.py's table of the variants after.
bench_ab() {
  local rounds=$1 r spec v flags bin; shift
  local specs=() names=()
  while [[ $1 != -- ]]; do specs+=("$1"); shift; done
  shift
  for r in $(seq "$rounds"); do
    for spec in "${specs[@]}"; do
      v=${spec%%=*}; flags=${spec#*=}; bin=bench
      [[ $v == *@* ]] && { bin=${v#*@}; v=${v%%@*}; }
      (( r == 1 )) && names+=("$v")
      timeout "${BENCH_TIMEOUT:-140}" "$BIN/$bin" "${@//\{VARIANT\}/$v-r$r}" ${flags//,/ } > "$R/bench-$v-r$r.txt" 2>&1
      echo "$v round $r rc=$? at $(elapsed)"
    done
  done
  python3 scripts/dev/ab_table.py "$R" "${names[@]}" --columns "${AB_COLUMNS:-ours/into}"
}
