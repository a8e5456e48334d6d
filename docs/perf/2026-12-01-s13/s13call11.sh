#!/bin/bash
# Session 13, call 11 (experiment, not on main unless it wins): FP8GEMM_BIG_GRID_PREFILL=N caps
# the weight stages loaded before griddepcontrol.wait for grids > 3 CTAs per SM (the gate/up
# GEMM at decode sizes), so that its early CTAs' ring fills slow the norm before it less
# (call 6: that norm 8.54 us vs 6.05 for the one before q|k|v). Decode b1 / b16, 8 (= all, the
# default) vs 4 vs 2 vs 0, interleaved x2.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/decode.xz > bundle/bin/decode; chmod +x bundle/bin/decode
OUT=$R/dec REPEAT=2 DECODE_TIMEOUT=60 bash scripts/dev/decode_sweep.sh "FP8GEMM_BIG_GRID_PREFILL=8 FP8GEMM_BIG_GRID_PREFILL=4 FP8GEMM_BIG_GRID_PREFILL=2 FP8GEMM_BIG_GRID_PREFILL=0" "1 16" > $R/decode.txt 2>&1
echo "decode done at $(( $(date +%s) - T0 )) s"
cat $R/dec/sweep-table.txt
cd $OUT && tar czf s13call11.tgz r && rm -rf r && echo packed
