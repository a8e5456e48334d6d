#!/bin/bash
# Prepared in session 24 (not run): should the large-M tile choice count split tails? Today's
# rule (src/dispatch.rs) compares whole rounds of 256x128 and 128x128 tiles; with a split tail
# (session 24) the last partial round of a tile costs 1/S of a round when it holds <= S/2 tiles
# and at least one full round precedes it (single-round 256x128 tails measured 30-50 % slower).
# That model (R full rounds and L tiles left: cost R + 1/S when R >= 1 and L <= S_sms/2, with
# S = min(4, S_sms / L, kb), else R + 1; 256x128 if 200 * cost256 < 108 * cost128) changes the
# config of these 27 shapes (M = 257-8192 on the Qwen3-32B and 4096^2 shapes). Sweep old vs new
# config, two rounds (op path, hot / cold). Session 24 measured down / o 2048 at +0.6-1.2 % (power
# mode): expect gains of 0-3 %, losses where the 256x128 tile's energy advantage is smaller than
# the model's 8 %.
# Run from the repo root (harness route): bash docs/perf/2026-12-02-s25/s25call3.sh (prepared in session 24 as docs/perf/next-s25/large-m-tail.sh)
source scripts/dev/harness_prelude.sh
SW="timeout 240 $H --lib /tmp/lib_plain.so sweep --no-full"
for r in 1 2; do
{
$SW --only persistent256x128s3,persistent128x128s5k4 --shapes 640,4096,4096 640,10240,5120 512,5120,8192 512,5120,25600
$SW --only persistent256x128s3,persistent128x128s5k2 --shapes 768,4096,4096
$SW --only persistent128x128s5,persistent256x128s3k2 --shapes 1536,4096,4096 1024,10240,5120 2048,5120,8192 2048,5120,25600
$SW --only persistent128x128s5,persistent256x128s3k4 --shapes 512,10240,5120 1024,5120,8192 1024,5120,25600
$SW --only persistent256x128s3,persistent128x128s5k3 --shapes 1536,10240,5120 3072,5120,8192 3072,5120,25600
$SW --only persistent256x128s3,persistent256x128s3k3 --shapes 3072,10240,5120
$SW --only persistent256x128s3,persistent256x128s3k2 --shapes 8192,10240,5120 3072,51200,5120 4096,51200,5120
$SW --only persistent128x128s5,persistent128x128s5k4 --shapes 257,51200,5120 384,51200,5120 640,51200,5120
$SW --only persistent256x128s3,persistent256x128s3k4 --shapes 512,51200,5120 768,51200,5120 1024,51200,5120 1536,51200,5120 2048,51200,5120
} > $O/sweep-r$r.txt 2>&1
echo "round $r at $(( $(date +%s) - T0 )) s"
done
grep -h -E "Error|error|Traceback|WRONG" $O/sweep-*.txt | head -5
for f in $O/sweep-r*.txt; do grep -h "^SWEEP [0-9]" $f | awk -v f=$(basename $f .txt) '{printf "%-9s %s %s %s %-26s %8s %8s\n", f, $2, $3, $4, $5, $6, $7}'; done
