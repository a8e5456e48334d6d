#!/bin/bash
# Session 12, call 1: (1) the decode loop's launch-ahead (next step enqueued before the sampled
# ids are read back asynchronously) and (2) deep swap-AB rings at S < N/64 <= 2S (8 x 64 x 12,
# 16 x 64 x 10, two CTAs per SM; the q|k|v GEMM). Build A = main + launch-ahead, build B = A +
# deep rings (deep-ring.patch). GPU suites of B; bench A / B / A + anchors on the q|k|v shapes;
# decode b1 / b16 x3 interleaved: A with launch-ahead off, A on, B on.
# NOTE: this build's readback waited on events that candle never lets cudarc record: finish()
# returned before the copy ran (TTFT below the prefill, host blocked in launches instead):
# its launch-ahead rows are not valid TPOTs; call 2 has the fixed build.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
for f in bundle/dev/*.xz; do b=$(basename $f .xz); xz -dc $f > bundle/bin/$b; done; chmod +x bundle/bin/*
cp bundle/bin/decode_A bundle/bin/decode
BIN=$PWD/bundle/bin
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for t in qwen3_gpu gpu gpu_reliability; do
  timeout 240 $BIN/${t}_B --test-threads=1 > $R/test-$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/test-$t.txt)"
done
echo "tests done at $(( $(date +%s) - T0 )) s"
SH="1,10240,5120 16,10240,5120"
for v in A B A; do
  timeout 100 $BIN/bench_$v --json $R/bench-$v$SECONDS.json --shapes $SH > $R/bench-$v$SECONDS.log 2>&1; echo "bench $v rc=$?"
done
timeout 150 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings --shapes $SH > $R/anchors.log 2>&1; echo "anchors rc=$?"
for f in $R/bench-*.json; do echo "== $f"; python3 scripts/perf_table.py $f $R/anchors.log 2>&1 | cut -c1-260 | grep -E "10240"; done
echo "bench done at $(( $(date +%s) - T0 )) s"
OUT=$R/dec REPEAT=3 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LAUNCH_AHEAD=0 CANDLE_FP8_LAUNCH_AHEAD=1 DECODE_BIN=$BIN/decode_B" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
grep -h "id readback" $R/dec/*.log | sort | uniq -c
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s12call1.tgz r && rm -rf r && echo packed
