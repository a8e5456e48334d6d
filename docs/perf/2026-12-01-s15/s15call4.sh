#!/bin/bash
# Session 15, call 4: anchors.py (torch cuBLASLt, Triton: the peers, default shapes); call 5 runs
# our bench right after on the same machine.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,serial,clocks.sm,temperature.gpu --format=csv,noheader
timeout 420 python3 bundle/dev/anchors.py --json $R/anchors.json --no-ceilings > $R/anchors.log 2>&1; echo "anchors rc=$? at $(( $(date +%s) - T0 )) s"
tail -3 $R/anchors.log
cd $OUT && tar czf s15call4.tgz r && rm -rf r && echo packed
