#!/bin/bash
# Session 38 call 2: the Speed issue's same-run table on HEAD (anchors.py then bench), with an
# nvidia-smi log of clocks, power and throttle reasons alongside (the evidence for the large-M
# rows' power cap), then "into" A/B of the 16-token stream-K tile's ring depth and split on
# gate_up 16 (the op sweep of call 1 put s8 ahead of the dispatched s7 on some splits, within noise).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,nounits -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
same_run_table
kill $SMI
grep -E "\*\*no\*\*|Rows meeting" $R/final-table.md | cut -c1-200
config_ab gate_up16 16,51200,5120 - 5,16,64,8,3 5,16,64,8,8
pack_out s38call2
