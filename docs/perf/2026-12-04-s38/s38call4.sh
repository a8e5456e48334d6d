#!/bin/bash
# Session 38 call 4: the dispatch change (gate/up-width GEMMs at 9-16 tokens on the 16-token
# stream-K tile, 8 stages two per SM): gpu_reliability's stream-K checks + synccheck, the gpu
# suite, then the new dispatch against the old binary (bench_old) on the rule's shapes incl. a
# short K (9×25344×2048) that call 3 did not time.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
reliability_checks
run_suites gpu
bench_ab 2 new= old@bench_old= -- --shapes 16,51200,5120 12,51200,5120 9,25344,2048 16,10240,5120 --columns ours,into
echo "done at $(elapsed)"
pack_out s38call4
