#!/bin/bash
# Session 10 call 4: the decode-shape GEMMs in isolation — split-K per shape (harness, 3x),
# per-CTA timelines (probe), and the Rust bench's op vs into columns (3x).
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$OUT/s10c4; mkdir -p $R
(cd bundle/kdev && bash build.sh > $R/build.txt 2>&1) &
mkdir -p bundle/kdev_probe && cp -r bundle/kdev/kernels bundle/kdev/build.sh bundle/kdev_probe/
(cd bundle/kdev_probe && EXTRA_FLAGS=-DFP8GEMM_PROBE bash build.sh > $R/build-probe.txt 2>&1) &
mkdir -p bundle/bin && xz -dc bundle/dec/bench.xz > bundle/bin/bench && chmod +x bundle/bin/bench
SHQ="1,10240,5120 1,5120,8192 1,51200,5120 1,5120,25600 16,10240,5120 16,5120,8192 16,51200,5120 16,5120,25600"
for rep in 1 2 3; do timeout 100 bundle/bin/bench --json $R/bench-$rep.json --shapes $SHQ > $R/bench-$rep.txt 2>&1; done
wait
cd bundle/kdev
C=auto,swap_ab8x64s8,swap_ab8x64s8k2,swap_ab8x64s8k3,swap_ab8x64s8k4,swap_ab8x64s8k5,swap_ab8x64s8k6
for rep in 1 2 3; do timeout 100 python3 harness.py sweep --no-full --only $C --shapes 1,10240,5120 1,5120,8192 1,5120,25600 4,10240,5120 > $R/sweep-$rep.txt 2>&1; done
timeout 60 python3 harness.py --lib ../kdev_probe/libfp8gemm.so probe --only swap_ab8x64s8,swap_ab8x64s8k2,swap_ab8x64s8k3 --shapes 1,10240,5120 1,5120,8192 1,5120,25600 > $R/probe.txt 2>&1
