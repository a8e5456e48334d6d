#!/bin/bash
# Session 22 call 1 (harness route, no cargo): the promotion overlapped across K blocks
# (kXPromote, development keys warp_spec 128x128 s206 and persistent 128x128 s205) against their
# base configs: correctness (torch reference, bitwise vs the base), hot / cold sweep, per-stage
# probe. Run from the repo root: bash docs/perf/2026-12-02-s22/s22call1.sh
source scripts/dev/harness_prelude.sh
$H --lib /tmp/lib_plain.so check --shapes 129,4096,4096 200,5120,8192 255,10240,5120 128,4096,384 300,144,384 \
  1000,1024,5120 2048,4096,4096 65,5120,25600 77,256,128 > $O/check.txt 2>&1
tail -5 $O/check.txt
echo "check $(( $(date +%s) - T0 )) s"
MID=auto,warp_spec128x128s6,warp_spec128x128s6k2,warp_spec128x128s6k3,warp_spec128x128s6k4,warp_spec128x128s206,warp_spec128x128s206k2,warp_spec128x128s206k3,warp_spec128x128s206k4,small_m64x128s6,small_m64x128s6k2,persistent128x128s5,persistent128x128s205
BIG=auto,persistent256x128s3,persistent128x128s5,persistent128x128s205,warp_spec128x128s6,warp_spec128x128s206
$H --lib /tmp/lib_plain.so sweep --no-full --only $MID --shapes 128,10240,5120 128,51200,5120 128,5120,8192 \
  128,5120,25600 128,4096,4096 160,4096,4096 192,4096,4096 256,4096,4096 256,10240,5120 > $O/sweep-mid.txt 2>&1
echo "sweep mid $(( $(date +%s) - T0 )) s"
$H --lib /tmp/lib_plain.so sweep --no-full --only $BIG --shapes 512,4096,4096 1024,4096,4096 2048,4096,4096 \
  4096,4096,4096 2048,5120,8192 2048,10240,5120 > $O/sweep-big.txt 2>&1
echo "sweep big $(( $(date +%s) - T0 )) s"
wait $BPID
$H --lib /tmp/lib_stages.so stages --only warp_spec128x128s6,warp_spec128x128s206 --shapes 128,10240,5120 > $O/stages.txt 2>&1
$H --lib /tmp/lib_stages.so stages --only persistent128x128s5,persistent128x128s205 --shapes 2048,4096,4096 >> $O/stages.txt 2>&1
echo "stages $(( $(date +%s) - T0 )) s"
grep -E "WRONG|DIFFER|FAIL" $O/*.txt | head -20
grep -E "BITWISE" $O/sweep-*.txt | awk '{print $NF}' | sort | uniq -c
grep STAGES $O/stages.txt | cut -c1-200
python3 - $O/sweep-mid.txt $O/sweep-big.txt <<'PY'
import sys, collections
rows = collections.OrderedDict()
for f in sys.argv[1:]:
    for l in open(f):
        if l.startswith("SWEEP ") and not l.startswith("SWEEP M"):
            _, M, N, K, c, h, co = l.split()
            rows.setdefault((M, N, K), []).append((c, float(h), float(co)))
for (M, N, K), v in rows.items():
    print(f"{M}x{N}x{K}: " + "  ".join(f"{c.replace('warp_spec','ws').replace('persistent','p').replace('small_m','sm')} {h:.1f}/{co:.1f}" for c, h, co in v))
PY
