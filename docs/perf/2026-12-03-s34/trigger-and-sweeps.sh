#!/bin/bash
# Prepared in session 33 (not run). Carry bundle/dev: bench and decode built WITH
# swap-trigger-exit.patch (the knob is off unless CANDLE_FP8_DEV_SWAP_TRIGGER=exit, so "on" is
# the dispatched behaviour), lib_head.so (scripts/dev/build.sh WITHOUT the patch), anchors.py
# not needed. ~6 device minutes. Log in $OUT/log.txt as it goes.
# 1. The swap-AB tiles' PDL trigger at CTA exit vs today's (after the last load / main loop).
#    Session 33's traces: chained behind another GEMM, q|k|v at 16 tokens packs its 160 CTAs two
#    per SM on ~82 SMs (18.4-19.0 us per launch) while a clean launch spreads them (16.3). With
#    the trigger at exit the next GEMM should start on a near-empty machine. Prediction: q|k|v 16
#    "into" 17.8 -> ~16.3-16.6 hot (the row needs <= 16.15: may still miss), 1-8 tokens "into"
#    +0.5-1 us (they lose the prologue overlap), the op unchanged; decode b1 / b16 slower by
#    ~0.1-0.2 ms (the attention and norm kernels after q|k|v / o / down start later) — if so,
#    the knob stays a patch and the table's q|k|v 16 miss is documented as the chained-launch
#    packing (the op meets it).
# 2. Harness sweeps of the next near misses: down 24 (met; is split 3 swap-AB better there
#    with a better split?), o 32, gate_up 16 (0.91 hot: needs 62.9 us, runs 63.8).
source scripts/dev/call_prelude.sh > $OUT/log.txt 2>&1
exec >> $OUT/log.txt 2>&1
SH="1,10240,5120 8,10240,5120 12,10240,5120 16,10240,5120 16,5120,25600 16,5120,8192 32,10240,5120 16,51200,5120"
# bench_ab passes its flags to bench's command line: the knob, an environment variable, goes
# through a wrapper that bench_ab runs as exit@bench_exit.
printf '#!/bin/sh\nCANDLE_FP8_DEV_SWAP_TRIGGER=exit exec %s "$@"\n' "$BIN/bench" > $BIN/bench_exit
chmod +x $BIN/bench_exit
bench_ab 2 on= exit@bench_exit= -- --shapes $SH --columns ours,into --samples 15 --no-check \
  --json "$R/{VARIANT}.json"
OUT=$R/dec REPEAT=2 DECODE_TOKENS=32 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_DEV_SWAP_TRIGGER=exit X=on" "1 16" > $R/decode.txt 2>&1
echo "decode rc=$? at $(elapsed)"
sed 's@/[^ ]*/bundle/bin/@@' $R/dec/sweep-table.txt
pack_out s34trigger
R=$OUT/r; mkdir -p $R
H="python3 scripts/dev/harness.py --lib $BIN/lib_head.so"
for s in 24,5120,25600 32,5120,8192 16,51200,5120; do
  (( $(date +%s) - T0 > 500 )) && break
  timeout 90 $H sweep --no-full --shapes $s > $R/sweep-$s.txt 2>&1
  echo "sweep $s rc=$? at $(elapsed)"; grep BEST $R/sweep-$s.txt
done
cat $R/sweep-*.txt > $R/sweep.txt
python3 scripts/dev/summarize.py sweep $R/sweep.txt > $R/sweep-summary.txt 2>&1
cut -c1-400 $R/sweep-summary.txt
pack_out s34sweeps
