#!/bin/bash
# Shared prelude of a harness-route device call (the kernels built on the device from the working
# tree, no cargo; docs/perf/*/sNcallM.sh run at the repo root). Source it first:
#
#   source scripts/dev/harness_prelude.sh
#   $H --lib /tmp/lib_plain.so sweep --no-full --only auto,... --shapes M,N,K ... > $O/sweep.txt
#   wait $BPID   # the per-stage probe build, then: $H --lib /tmp/lib_stages.so stages ...
#
# Sets O (= $OUT, the folder that comes back), T0, H (the harness command), builds
# /tmp/lib_plain.so (exits on a build error) and starts the -DFP8GEMM_TRACE_STAGES build of
# /tmp/lib_stages.so in the background (BPID).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
H="python3 scripts/dev/harness.py"
bash scripts/dev/build.sh > "$O/build.txt" 2>&1 || { cat "$O/build.txt"; exit 1; }
cp libfp8gemm.so /tmp/lib_plain.so
echo "build $(( $(date +%s) - T0 )) s"
(EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES bash scripts/dev/build.sh > "$O/build-stages.txt" 2>&1 && cp libfp8gemm.so /tmp/lib_stages.so) &
BPID=$!

# correctness_suite [CHECK_TIMEOUT_S]: harness check (every config), then racecheck and memcheck
# on `sanitize --quick`, each line printed with the seconds since T0 (logs in $O).
correctness_suite() {
  timeout "${1:-150}" $H --lib /tmp/lib_plain.so check > $O/check.txt 2>&1
  echo "check rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "^CHECK|FAIL" $O/check.txt | head -10
  local tool
  for tool in racecheck memcheck; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $H --lib /tmp/lib_plain.so sanitize --quick > $O/$tool.txt 2>&1
    echo "$tool rc=$? $(grep -h 'SUMMARY\|sanitize driver' $O/$tool.txt | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  done
}
