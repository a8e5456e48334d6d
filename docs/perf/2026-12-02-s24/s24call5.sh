#!/bin/bash
# Session 24, call 5 (bundle route): the model's step with the split tail dispatched. Prefill of
# a 100-token prompt runs o and down at M = 100 (now the persistent 128x128 tile with a 3-way
# split tail instead of warp-specialized + reduce): TTFT should not grow (session 23: 22.2-22.3
# ms), TPOT (M = 1) is untouched (8.88-8.95 ms over 32 tokens).
# Pack here: CARGO_TARGET_DIR=/work/target-cuda bash scripts/dev/pack.sh decode
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=1 DECODE_TOKENS=32 timeout 200 bash scripts/dev/decode_sweep.sh "X=default" "1" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/decode.txt
grep -h -i "error\|panic" $R/dec/*.log | head -3
pack_out s24call5
