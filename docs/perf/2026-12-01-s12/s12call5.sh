#!/bin/bash
# Session 12, call 5: scripts/dev/boundary_bench.cu — the cost of a kernel boundary in a PDL
# launch chain (graph of trivial kernels) vs a flag handoff between two CTAs of one kernel.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
chmod +x bundle/dev/boundary_bench
timeout 120 bundle/dev/boundary_bench 2>&1 | tee $OUT/boundary.txt
