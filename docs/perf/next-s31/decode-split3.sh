#!/bin/bash
# Prepared in session 30 (not run: the session's device time ran out). Session 30 call 3's decode
# step at 48 sequences ran 0.6 % slower with the overlapped-promotion small-M loop (64 sequences
# 0.2 % faster). At 33-64 tokens the o and down GEMMs run the 64x128 tile split 3 (workspace
# sum); call 3's bench had 64x5120x8192 cold +1.5 %. Variant b (split3-halves.patch here, not
# committed): split >= 3 on the N-halves loop (development key 106's), the overlapped loop at
# split 1-2. Build here: bench + decode at HEAD, pack as-is; `git apply` the patch, rebuild,
# `pack.sh bench=b decode=b`, revert; a build before 21112af as bench_old / decode_old. Carry
# bundle/dev (< 64 MB). Decode b48 / b64 new vs b vs old, two rounds; bench new vs b vs old on o
# and down at 48 / 64 tokens (~2 device minutes).
source scripts/dev/call_prelude.sh
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_b DECODE_BIN=$BIN/decode_old" "48 64" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
cat $R/dec/sweep-table.txt | sed 's@/work/main/bundle/bin/@@'
AB_COLUMNS=ours/into/lt bench_ab 2 new= b@bench_b= old@bench_old= -- --shapes 48,5120,8192 64,5120,8192 48,5120,25600 64,5120,25600 \
  --columns ours,into,lt --samples 15 --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
tail -10 $R/ab.txt
pack_out s30call5
