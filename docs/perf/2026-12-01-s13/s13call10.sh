#!/bin/bash
# Session 13, call 10: benches/gpu_gemm.rs after it moved to the GPU tests' device helper
# (commit a077f30): two shapes, to check it still finds the device and measures.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/r; mkdir -p $R bundle/bin
xz -dc bundle/dev/gpu_gemm.xz > bundle/bin/gpu_gemm; chmod +x bundle/bin/gpu_gemm
timeout 100 bundle/bin/gpu_gemm --bench "1x4096x4096" > $R/criterion.log 2>&1; echo "criterion rc=$?"
grep -E "^gpu_gemm|time:|SKIP" $R/criterion.log
cd $OUT && tar czf s13call10.tgz r && rm -rf r
