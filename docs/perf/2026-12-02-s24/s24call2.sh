#!/bin/bash
# Session 24, call 2 (harness route). Call 1 hung in the first split-tail launch: the harness
# gave the kernels an uninitialised workspace (torch.empty), so the tail's flags started as
# garbage and the waiting unit never saw its count. Now: a 4 KiB flags page at the start of a
# workspace of its own, allocated zeroed (harness ws_tail, Rust StreamState::tail_workspace),
# and a bounded wait that traps (an error, not a hang). Same questions as call 1, fewer shapes,
# every step under its own timeout.
source scripts/dev/harness_prelude.sh
wait $BPID
ROOT=$PWD
el() { echo "$(( $(date +%s) - T0 )) s"; }
mkdir -p /tmp/old /tmp/pr1 /tmp/pr2 /tmp/pr3
cp -r bundle/dev/old/kernels /tmp/old/
for v in 1 2 3; do cp -r bundle/dev/old/kernels /tmp/pr$v/; (cd /tmp/pr$v && patch -s -p1 < $ROOT/docs/perf/2026-12-02-s24/energy-probe.patch); done
(cd /tmp/old && bash $ROOT/scripts/dev/build.sh > $O/build-old.txt 2>&1) &
for v in 1 2 3; do (cd /tmp/pr$v && EXTRA_FLAGS=-DFP8GEMM_ENERGY_PROBE=$v bash $ROOT/scripts/dev/build.sh > $O/build-e$v.txt 2>&1) & done
BUILDS=$!

timeout 120 $H --lib /tmp/lib_plain.so check --shapes 300,272,2048 1,4096,4096 257,144,384 513,1024,5120 \
  128,4096,4096 160,4096,4096 192,4096,4096 256,4096,4096 1000,10240,5120 2048,5120,8192 2048,5120,25600 \
  4096,4096,4096 > $O/check.txt 2>&1
echo "check rc=$? $(grep CHECK: $O/check.txt) at $(el)"
grep -E "FAIL|Error|error" $O/check.txt | head -8

P=persistent
SW="timeout 100 $H --lib /tmp/lib_plain.so sweep --no-full"
$SW --only auto,${P}256x128s3,${P}256x128s3k2,${P}128x128s5 --shapes 2048,5120,25600 2048,5120,8192 > $O/sweep-big.txt 2>&1
echo "sweep-big rc=$? at $(el)"
$SW --only auto,${P}256x128s3k4 --shapes 2048,51200,5120 > $O/sweep-gu.txt 2>&1
echo "sweep-gu rc=$? at $(el)"
{
$SW --only auto,${P}256x128s3k4,${P}256x128s3k2,${P}128x128s5k2 --shapes 256,4096,4096 192,4096,4096 160,4096,4096
$SW --only auto,${P}128x128s5k4 --shapes 128,4096,4096
$SW --only auto,${P}256x128s3k2 --shapes 512,4096,4096
$SW --only auto,${P}128x128s5k4,${P}128x128s5k2 --shapes 256,10240,5120
$SW --only auto,${P}256x128s3k3 --shapes 256,5120,8192
$SW --only auto,${P}128x128s5k3 --shapes 128,5120,8192 128,5120,25600
} > $O/sweep-mid.txt 2>&1
echo "sweep-mid rc=$? at $(el)"
wait $BUILDS; wait
PW="timeout 40 $H"
$PW --lib /tmp/old/libfp8gemm.so power --only ${P}256x128s3 --shapes 4096,4096,4096 > $O/power-old.txt 2>&1
$PW --lib /tmp/lib_plain.so power --only ${P}256x128s3 --shapes 4096,4096,4096 > $O/power-new.txt 2>&1
timeout 60 $H --lib /tmp/lib_plain.so power --only ${P}256x128s3k2,${P}128x128s5,torch_lt --shapes 2048,5120,25600 > $O/power-down.txt 2>&1
for v in 1 2 3; do
  $PW --lib /tmp/pr$v/libfp8gemm.so power --only ${P}256x128s3 --shapes 4096,4096,4096 > $O/power-e$v.txt 2>&1
done
echo "power at $(el)"
grep -h -E "Error|error|Traceback|WRONG|BITWISE" $O/sweep-*.txt $O/power-*.txt | head -8
grep -h "^SWEEP [0-9]" $O/sweep-*.txt | awk '{printf "%s %s %s %-26s %8s %8s\n", $2, $3, $4, $5, $6, $7}'
for f in old new e1 e2 e3 down; do grep -h "^POWER [0-9]" $O/power-$f.txt | sed "s#^POWER#$f#"; done
