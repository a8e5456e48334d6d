#!/bin/bash
# (As run, except that its inline ab() became call_prelude.sh's config_ab: the same commands.)
# Session 37 call 2: new stream-K tiles (32 tokens x 5 stages, three per SM; 64 tokens x 6
# stages, two per SM) — correctness (forced_splits covers them), then op / "into" A/B against
# the dispatched config on the rows that miss (q|k|v 24-128, down / gate_up 128, 4096² 64 / 128)
# and a few near ones (stream-K with the parallel storer at 8 tokens, o / down 16, gate_up / o 32);
# decode b32 with q|k|v at 17-32 tokens on stream-K (sk2: 32x64x8 two per SM; sk3: 32x64x5 three).
# bundle/dev: bench, decode, gpu_reliability (HEAD 18d837c + the two configs), decode_sk2/_sk3.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
timeout 300 $BIN/gpu_reliability forced_splits dev_variants sanitizer_boundary_shapes --test-threads=1 > $R/test-rel.txt 2>&1
echo "forced_splits + dev_variants + sanitizer_boundary rc=$? $(grep '^test result' $R/test-rel.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-rel.txt | head -5
config_ab qkv32 32,10240,5120 - 5,32,64,8,2 5,32,64,5,3
config_ab qkv24 24,10240,5120 - 5,32,64,5,3
config_ab qkv64 64,10240,5120 - 5,64,64,6,2 5,32,64,5,3
config_ab qkv128 128,10240,5120 - 5,64,64,6,2
config_ab down128 128,5120,25600 - 5,64,64,6,2
config_ab gu128 128,51200,5120 - 5,64,64,6,2
config_ab sq64 64,4096,4096 - 5,64,64,6,2
config_ab sq128 128,4096,4096 - 5,64,64,6,2
config_ab qkv8 8,10240,5120 - 5,8,64,8,3
config_ab o16 16,5120,8192 - 5,16,64,7,3
config_ab down16 16,5120,25600 - 5,16,64,7,3
config_ab gu32 32,51200,5120 - 5,32,64,5,3
config_ab o32 32,5120,8192 - 5,32,64,5,3
echo "bench at $(elapsed)"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=base DECODE_BIN=$BIN/decode_sk2 DECODE_BIN=$BIN/decode_sk3" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s37call2
