#!/bin/bash
# Session 35 call 5: the gated gate/up test after its fix (call 4 failed it: at 9-16 tokens over
# 800 tiles the dispatcher picks stream-K since b62613c, so the composed reference split K; the
# reference now runs the one-tile swap-AB config, through a per-thread config override), and
# forced_splits (the override, now thread-local, is what it forces configurations with).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
SUITE_TIMEOUT=90 run_suites gpu_fused
timeout 60 $BIN/gpu_reliability forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
pack_out s35call5
