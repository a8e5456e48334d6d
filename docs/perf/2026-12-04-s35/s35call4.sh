#!/bin/bash
# Session 35 call 4: every GPU suite except gpu_reliability (forced_splits ran in call 1) on the
# final code (f6fd059 kernels and dispatch; no code change this session).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
SUITE_TIMEOUT=120 run_suites gpu gpu_fused qwen3_gpu gpu_attention gpu_sampling
pack_out s35call4
