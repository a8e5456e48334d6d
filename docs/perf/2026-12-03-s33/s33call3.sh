#!/bin/bash
# Session 33, call 3: swap-AB 32-token tiles split over K at 17-32 tokens, from the near-miss sweep
# (call 2, harness "into"-like chains: down 32 swap_ab32x64s8k3 35.59 / 35.91 us vs auto 37.33 /
# 37.21; q|k|v 32 swap_ab32x64s8k3 17.78 / 17.90 vs auto 18.36 / 18.48). Builds (bundle/dev):
# s3a = rule A: 17-32 tokens with S/2 < N/64 < S (down, o): swap-AB 32 x 64, split_for(N/64, kb,
# 2S, 16) (down and o: split 3, 240 CTAs) instead of small-M 64 x 128 split 3; s3b = A + rule B:
# 17-32 tokens with S <= N/64 < 2S, kb >= 48 (q|k|v): split 3 instead of 1. old = HEAD.
# bench "into" / op, two interleaved rounds, then decode b32 (both rules in its step), then the
# forced splits (now with the swap-AB 32-token tile at 17 and 32 tokens) on the s3b build.
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
AB_COLUMNS=ours/into bench_ab 2 s3a@bench_s3a= s3b@bench_s3b= old= -- --shapes 17,5120,25600 24,5120,25600 \
  32,5120,25600 24,5120,8192 32,5120,8192 17,10240,5120 24,10240,5120 32,10240,5120 32,4096,4096 \
  --columns ours,into --samples 15 --no-check --json "$R/{VARIANT}.json" > $R/ab.txt 2>&1
echo "bench_ab rc=$? at $(elapsed)"; tail -20 $R/ab.txt
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh \
  "DECODE_BIN=$BIN/decode_s3a DECODE_BIN=$BIN/decode_s3b X=old" "32" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
[[ -x $BIN/gpu_reliability_s3b ]] && timeout 200 $BIN/gpu_reliability_s3b forced_splits --test-threads=1 > $R/test-forced.txt 2>&1
echo "forced_splits rc=$? $(grep '^test result' $R/test-forced.txt) at $(elapsed)"
grep -h "SKIP\|FAILED\|panicked" $R/test-forced.txt | head -5
pack_out s33call4
