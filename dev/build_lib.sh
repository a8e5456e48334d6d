#!/bin/bash
# Builds libfp8gemm.so from kernels/ for the ctypes tools (dev/harness.py, bitwise_dump.py):
# the kernel families' .cu files (gemm, fused, attention, sampling; with -DFP8GEMM_TRACE also
# trace/trace.cu), compiled in parallel with the build's flags, then linked into one shared
# library. No cargo. Run from the repo root:
#
#   bash dev/build_lib.sh                                    # -> ./libfp8gemm.so, logs in build/
#   EXTRA_FLAGS=-DFP8GEMM_TRACE bash dev/build_lib.sh        # per-CTA timeline (harness.py probe)
#   EXTRA_FLAGS=-DFP8GEMM_TRACE_STAGES bash dev/build_lib.sh # per-stage probe (harness.py stages)
#
# Prints ptxas' register / spill summary. NVCC (default nvcc), JOBS (default: all at once).
set -e
NVCC=${NVCC:-nvcc}
FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -Xcompiler -fPIC -I kernels/include -I kernels ${EXTRA_FLAGS:-}"
SRCS=$(ls kernels/{gemm,fused,attention,sampling}/*.cu)
if [[ " ${EXTRA_FLAGS:-} " == *" -DFP8GEMM_TRACE "* ]]; then SRCS="$SRCS kernels/trace/trace.cu"; fi
mkdir -p build
n=0
for f in $SRCS; do
  b=$(echo "${f#kernels/}" | tr / _); b=${b%.cu}
  $NVCC $FLAGS -Xptxas -v -c $f -o build/$b.o > build/$b.log 2>&1 &
  n=$((n + 1))
  if [[ -n "${JOBS:-}" && $((n % JOBS)) == 0 ]]; then wait; fi
done
wait
for f in $SRCS; do
  b=$(echo "${f#kernels/}" | tr / _); b=${b%.cu}
  [[ -s build/$b.o ]] || { cat build/$b.log; exit 1; }
done
grep -h -E "spill|Used" build/*.log | sort | uniq -c | sort -rn | head -20
objs=""
for f in $SRCS; do b=$(echo "${f#kernels/}" | tr / _); objs="$objs build/${b%.cu}.o"; done
$NVCC -shared -o libfp8gemm.so $objs
