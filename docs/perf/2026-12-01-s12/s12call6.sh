#!/bin/bash
# Session 12, call 6: can id_readback_waits_for_the_copy fail? The gpu_sampling suite built with
# the first launch-ahead build's readback (no per-slot events: finish() waits on events candle
# never lets cudarc record). Expected: that test fails (poison or stale ids read), the rest pass.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
xz -dc bundle/dev/gpu_sampling_broken.xz > /tmp/gsb && chmod +x /tmp/gsb
timeout 100 /tmp/gsb --test-threads=1 2>&1 | tee $OUT/gpu_sampling_broken.txt | grep -E "^test |panicked|left:|right:|test result" | cut -c1-300
