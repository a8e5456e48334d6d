#!/bin/bash
# Session 29 call 5 (bundle route): the model's step with the q|k|v GEMM at 48 / 64 sequences —
# decode (new dispatch: 64 x 64 x 4 tiles at M = 33-64 on q|k|v) vs decode_old (the same tree
# with that rule off), Qwen3-32B architecture, random weights, prompt 100, 32 tokens, two
# interleaved rounds. Call 4 measured the GEMM alone: faster chained under PDL ("into"), slower
# in isolation ("ours" with an allocation between launches); the step decides.
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt
pack_out s29call5
