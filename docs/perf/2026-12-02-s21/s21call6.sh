#!/bin/bash
# Session 21, call 6: the final build — small-M 64 x 128 and persistent 128 x 128 with two TMA
# issuer threads as the dispatched tiles, their single-issuer versions as development keys.
# Build and pack here: bash /work/build.sh && rm -f bundle/dev/* &&
#   CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh bench gpu gpu_reliability &&
#   cp docs/perf/2026-12-02-s21/s21call6.sh bundle/dev/
# 0. gpu (reference grid on the dispatched configs), dev_variants (two issuers vs one, bitwise,
#    CPU reference), forced_splits, sanitizer_boundary_shapes; racecheck on dev_variants.
# 1. bench ours / into / cuBLASLt on the rows these tiles serve, dispatched (two issuers) vs
#    --dev-variant (one), two interleaved rounds.
source scripts/dev/call_prelude.sh
run_suites gpu
timeout 300 $BIN/gpu_reliability dev_variants forced_splits sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "dev_variants + forced_splits + sanitizer_boundary_shapes rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-rel.txt | head -5
CANDLE_FP8_TEST_PROVIDERS=hopper timeout 180 compute-sanitizer --tool racecheck --error-exitcode 9 \
  $BIN/gpu_reliability dev_variants --test-threads=1 > $R/racecheck.txt 2>&1
echo "racecheck dev_variants rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $R/racecheck.txt | sort | uniq -c | tr '\n' ' ') at $(elapsed)"
SH="160,4096,4096 192,4096,4096 224,4096,4096 256,4096,4096 512,4096,4096 64,10240,5120 64,51200,5120
2048,5120,8192"
for r in 1 2; do
  for v in two one; do
    flag=""; [[ $v == one ]] && flag=--dev-variant
    timeout 140 $BIN/bench --shapes $SH --columns ours,into,lt --samples 15 $flag > $R/bench-$v-r$r.txt 2>&1
    echo "$v round $r rc=$? at $(elapsed)"
  done
done
python3 - $R <<'PY' | tee $R/ab-table.txt
import sys, re, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench-*-r*.txt")):
    v = f.split("bench-")[1].split("-r")[0]
    for l in open(f):
        m = re.match(r"custom/(hot|cold)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)", l)
        if m:
            d[(int(m[2]), int(m[3]), int(m[4]), m[1], v)].append(f"{m[5]}/{m[6]}/{m[7]}")
keys = sorted({k[:4] for k in d})
print(f"{'shape':>18} {'temp':>4} {'two issuers ours/into/lt (r1, r2)':>44} {'one issuer ours/into/lt (r1, r2)':>44}")
for k in keys:
    print(f"{'x'.join(map(str, k[:3])):>18} {k[3]:>4} {' '.join(d[k + ('two',)]):>44} {' '.join(d[k + ('one',)]):>44}")
PY
grep -h "^config" $R/bench-one-r1.txt | sort | uniq -c
echo "done at $(elapsed)"
pack_out s21call6
