#!/bin/bash
# Session 12, call 3: the whole GEMM table of the Speed issue in one run: bench (default shapes:
# N = K = 4096 over 17 M values, the four Qwen3-32B shapes over 9 M values; ours "into" and
# "op", cuBLASLt blockwise through our wrapper, candle bf16) and anchors.py's default shapes
# (torch cuBLASLt, tuned Triton, torch bf16), then the merged table (scripts/perf_table.py).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/bench.xz > bundle/bin/bench; chmod +x bundle/bin/bench
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 200 bundle/bin/bench --json $R/bench.json > $R/bench.log 2>&1; echo "bench rc=$? at $(( $(date +%s) - T0 )) s"
timeout 390 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1; echo "anchors rc=$? at $(( $(date +%s) - T0 )) s"
python3 scripts/perf_table.py $R/bench.json $R/anchors.log > $R/table.md 2>&1; echo "table rc=$?"
cut -d'|' -f1-4,12-14 $R/table.md | head -70
cd $OUT && tar czf s12call3.tgz r && rm -rf r && echo packed
