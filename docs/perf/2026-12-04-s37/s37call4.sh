#!/bin/bash
# Session 37 call 4: checks of HEAD (parallel storer + gate/up 17-32 on 32x64x5 three per SM):
# gpu_reliability forced_splits / dev_variants / sanitizer_boundary_shapes, the gpu suite, then
# decode b1 / b16 / b32 (32 tokens, two rounds) for the README.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 300 $BIN/gpu_reliability forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "forced_splits + dev_variants + sanitizer_boundary rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
SUITE_TIMEOUT=200 run_suites gpu
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=head" "1 16 32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s37call4
