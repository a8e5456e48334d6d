#!/bin/bash
# Session 24, call 1 (harness route): the persistent split tail (tail_fixup.cuh: the tiles of a
# partial last round over the SMs run as split_k K ranges each, summed in the kernel).
#  1. correctness: harness check (every config; persistent at split 1/2/4, and 3 on 7 SMs);
#  2. the old kernels (32d61c6, bundle/dev/old) against the new at split 1 (power mode: steady
#     state us, clock, W) - the split-1 path must not move;
#  3. sweeps of split tails where the model says they pay: down / o at 2048 tokens (320 tiles of
#     256 x 128 = 2.42 rounds: predicted 2.5 instead of 128 x 128's 2.7 tile-times, ~7 %),
#     gate_up 2048 (24.25 vs 25 rounds), and M = 128-512 where one round is partly empty
#     (256 x 4096^2: 32 tiles of 256 x 128 in 4 K ranges = 128 CTAs, half the L2 traffic of
#     today's 128 tiles of 64 x 128);
#  4. session 23's prepared energy probe (-DFP8GEMM_ENERGY_PROBE on the old kernels): where the
#     energy of 4096^3 goes (copies / MMA / promotion), plus down 2048's energy.
source scripts/dev/harness_prelude.sh
wait $BPID
ROOT=$PWD
mkdir -p /tmp/old /tmp/pr1 /tmp/pr2 /tmp/pr3
cp -r bundle/dev/old/kernels /tmp/old/
for v in 1 2 3; do cp -r bundle/dev/old/kernels /tmp/pr$v/; (cd /tmp/pr$v && patch -s -p1 < $ROOT/docs/perf/2026-12-02-s24/energy-probe.patch); done
(cd /tmp/old && bash $ROOT/scripts/dev/build.sh > $O/build-old.txt 2>&1) &
for v in 1 2 3; do (cd /tmp/pr$v && EXTRA_FLAGS=-DFP8GEMM_ENERGY_PROBE=$v bash $ROOT/scripts/dev/build.sh > $O/build-e$v.txt 2>&1) & done
wait
ls -la /tmp/old/libfp8gemm.so /tmp/pr*/libfp8gemm.so | awk '{print $5, $9}'
echo "builds $(( $(date +%s) - T0 )) s"

timeout 200 $H --lib /tmp/lib_plain.so check > $O/check.txt 2>&1
echo "check rc=$? $(tail -n +1 $O/check.txt | grep CHECK:) at $(( $(date +%s) - T0 )) s"
grep FAIL $O/check.txt | head -8

P=persistent
SW="timeout 300 $H --lib /tmp/lib_plain.so sweep --no-full"
{
$SW --only auto,${P}256x128s3,${P}256x128s3k2,${P}256x128s3k3,${P}128x128s5,${P}128x128s5k2 --shapes 2048,5120,25600 2048,5120,8192
$SW --only auto,${P}256x128s3,${P}256x128s3k2,${P}256x128s3k4 --shapes 2048,51200,5120
$SW --only auto,${P}256x128s3k2,${P}128x128s5 --shapes 512,4096,4096
$SW --only auto,${P}256x128s3k4,${P}256x128s3k2,${P}128x128s5k4,${P}128x128s5k2 --shapes 256,4096,4096 192,4096,4096 160,4096,4096
$SW --only auto,${P}128x128s5k4,${P}128x128s5k2 --shapes 128,4096,4096
$SW --only auto,${P}256x128s3,${P}128x128s5k2,${P}128x128s5k4 --shapes 256,10240,5120
$SW --only auto,${P}256x128s3k3,${P}256x128s3k2,${P}128x128s5k2 --shapes 256,5120,8192
$SW --only auto,${P}128x128s5k3,${P}128x128s5k2 --shapes 128,5120,8192 128,5120,25600
} > $O/sweep.txt 2>&1
echo "sweeps at $(( $(date +%s) - T0 )) s"

PW="timeout 60 $H"
$PW --lib /tmp/old/libfp8gemm.so power --only ${P}256x128s3,${P}128x128s5 --shapes 4096,4096,4096 > $O/power-old.txt 2>&1
$PW --lib /tmp/lib_plain.so power --only ${P}256x128s3,${P}128x128s5 --shapes 4096,4096,4096 > $O/power-new.txt 2>&1
for v in 1 2 3; do
  $PW --lib /tmp/pr$v/libfp8gemm.so power --only ${P}256x128s3,${P}128x128s5 --shapes 4096,4096,4096 > $O/power-e$v.txt 2>&1
done
$PW --lib /tmp/old/libfp8gemm.so power --data zeros --only ${P}256x128s3 --shapes 4096,4096,4096 > $O/power-zeros.txt 2>&1
timeout 90 $H --lib /tmp/lib_plain.so power --only ${P}256x128s3,${P}256x128s3k2,${P}128x128s5,torch_lt --shapes 2048,5120,25600 > $O/power-down.txt 2>&1
echo "power at $(( $(date +%s) - T0 )) s"
grep -h -E "Error|error|Traceback|WRONG|BITWISE" $O/sweep.txt $O/power-*.txt | head -8
grep -h "^SWEEP [0-9]" $O/sweep.txt | awk '{printf "%s %s %s %-26s %8s %8s\n", $2, $3, $4, $5, $6, $7}'
for f in old new e1 e2 e3 zeros down; do grep -h "^POWER [0-9]" $O/power-$f.txt | sed "s#^POWER#$f#"; done
