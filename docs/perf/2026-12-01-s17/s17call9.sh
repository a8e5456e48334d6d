#!/bin/bash
# Session 17, call 9: gpu_fused again (its swiglu-epilogue test's third shape moved to one the
# new q|k|v-type split leaves unsplit) and the suites call 8 did not run.
source scripts/dev/call_prelude.sh
run_suites gpu_fused gpu_reliability gpu_attention gpu_sampling
pack_out s17call9
