#!/bin/bash
# Session 11, call 6: swap-AB 16 x 64 with 7 stages (three CTAs per SM) at M = 9-16 and wide N
# (N/64 >= SMs), on the 16-token tile without N halves: bench old / new / old on the two wide
# decode shapes at M = 16 (+ anchors: Triton, cuBLASLt in the same call), then decode b16 A/B
# x3 interleaved (old = main d1f595d's build, run with CANDLE_FP8_SWIGLU_IN=0 = main's path).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for b in decode_new decode_old bench_new bench_old; do xz -dc bundle/dev/$b.xz > bundle/bin/$b; done; chmod +x bundle/bin/*
cp bundle/bin/decode_new bundle/bin/decode
BIN=$PWD/bundle/bin
SH="16,51200,5120 16,10240,5120 1,51200,5120"
timeout 100 $BIN/bench_old --json $R/bench-old1.json --shapes $SH > $R/bench-old1.log 2>&1; echo "bench old rc=$?"
timeout 100 $BIN/bench_new --json $R/bench-new.json --shapes $SH > $R/bench-new.log 2>&1; echo "bench new rc=$?"
timeout 100 $BIN/bench_old --json $R/bench-old2.json --shapes $SH > $R/bench-old2.log 2>&1; echo "bench old rc=$?"
timeout 150 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings --shapes $SH > $R/anchors.log 2>&1; echo "anchors rc=$?"
for f in old1 new old2; do python3 scripts/perf_table.py $R/bench-$f.json $R/anchors.log > $R/table-$f.txt 2>&1; done
echo "bench done at $(( $(date +%s) - T0 )) s"
export CANDLE_FP8_SWIGLU_IN=0
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "DECODE_BIN=$BIN/decode_old DECODE_BIN=$BIN/decode_new" "16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
for f in old1 new old2; do echo "== $f"; cut -c1-200 $R/table-$f.txt | grep -E "51200|10240"; done
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s11call6.tgz r && rm -rf r && echo packed
