#!/bin/bash
# Session 28 call 3: (1) the 2-CTA cluster sum of the 2-warpgroup tiles split into halves (each
# rank sums and stores half the tile) — bitwise equal to rank 0 summing all of it (bundle/old =
# HEAD 6259026's kernels), and timed old vs new on the shapes that dispatch it (M = 65-128,
# 40 <= N/128 <= 66, K >= 4096: warp-specialized 128 x 128 split 2) and forced elsewhere;
# (2) the practical HBM floor of the decode-size GEMMs: a plain read of their weight bytes timed
# like the sweep (scripts/dev/hbm_floor.py).
source scripts/dev/harness_prelude.sh
(cd bundle/old && bash scripts/dev/build.sh > $O/build-old.txt 2>&1 && cp libfp8gemm.so /tmp/lib_old.so)
echo "old build rc=$? at $(( $(date +%s) - T0 )) s"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $H --lib /tmp/lib_plain.so sanitize --quick > $O/racecheck.txt 2>&1
echo "racecheck rc=$? $(grep -h 'SUMMARY\|sanitize driver' $O/racecheck.txt | tr '\n' ' ')"
timeout 120 python3 - > $O/bitwise.txt 2>&1 <<'PY'
import sys; sys.path.insert(0, "scripts/dev")
import torch, harness as h
new, old = h.Lib("/tmp/lib_plain.so"), h.Lib("/tmp/lib_old.so")
bad = n = 0
for (M, N, K) in [(128, 5120, 4096), (100, 6144, 4096), (128, 4096, 4096), (77, 8192, 5120), (65, 5248, 8192),
                  (256, 4096, 4096), (200, 272, 1536), (3, 1024, 4096)]:
    x, w, sw = h.make_inputs(M, N, K, seed=M + N)
    q, sa = new.quant(x)
    for name in ["warp_spec128x128s6k2", "warp_spec128x128s106k2", "warp_spec128x64s8k2", "auto"]:
        c = h.cfg_parse(name) if name != "auto" else h.cfg_of("auto")
        ys = []
        for lib in (new, old):
            y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            assert lib.gemm(q, sa, w, sw, y, c) == 0
            ys.append(y)
        torch.cuda.synchronize()
        same = torch.equal(ys[0].view(torch.int16), ys[1].view(torch.int16))
        n += 1; bad += not same
        print(f"BITWISE {M}x{N}x{K} {name}: {'equal' if same else 'DIFFER'}")
print(f"BITWISE {n} pairs, {bad} differ")
PY
echo "bitwise rc=$?"; tail -1 $O/bitwise.txt; grep DIFFER $O/bitwise.txt | head
for lib in plain old; do
  timeout 90 $H --lib /tmp/lib_$lib.so sweep --no-full --only auto,warp_spec128x128s6k2,warp_spec128x64s8k2 \
    --shapes 128,5120,4096 100,6144,4096 128,8192,4096 96,8192,5120 128,4096,4096 256,4096,4096 > $O/sweep-$lib.txt 2>&1
  echo "sweep $lib at $(( $(date +%s) - T0 )) s"
done
timeout 150 python3 scripts/dev/hbm_floor.py --ctas 1 2 4 > $O/hbm.txt 2>&1
echo "hbm rc=$? at $(( $(date +%s) - T0 )) s"
for lib in plain old; do echo "== $lib"; grep -h "^SWEEP [0-9]" $O/sweep-$lib.txt | awk '{printf "%5s %6s %6s %-24s %8s %8s\n", $2, $3, $4, $5, $6, $7}'; done
cat $O/hbm.txt
