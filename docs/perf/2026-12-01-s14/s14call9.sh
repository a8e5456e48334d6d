#!/bin/bash
# Session 14, call 9: the rest of gpu_reliability on the final kernels (call 7 was cut inside
# large_mn_no_index_overflow): wrong_device_operands, no_device_memory_growth,
# sanitizer_boundary_shapes plain and under compute-sanitizer memcheck (every schedule on both
# sides of each dispatch boundary: the math warpgroups' wait now comes after their main loop),
# then large_mn_no_index_overflow with what is left of the call.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export PATH=/usr/local/cuda/bin:$PATH
R=$OUT/r; mkdir -p $R bundle/bin; T0=$(date +%s)
xz -dc bundle/dev/gpu_reliability.xz > bundle/bin/gpu_reliability; chmod +x bundle/bin/gpu_reliability
B=bundle/bin/gpu_reliability
for t in wrong_device_operands no_device_memory_growth sanitizer_boundary_shapes; do
  timeout 90 $B --test-threads=1 --exact $t > $R/$t.txt 2>&1; echo "$t rc=$? $(grep '^test result' $R/$t.txt) at $(( $(date +%s) - T0 )) s"
done
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B --test-threads=1 --exact sanitizer_boundary_shapes > $R/memcheck.txt 2>&1; echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep "ERROR SUMMARY\|test result" $R/memcheck.txt | head -3
left=$(( 290 - ($(date +%s) - T0) ))
timeout $left $B --test-threads=1 --exact large_mn_no_index_overflow > $R/large_mn.txt 2>&1; echo "large_mn rc=$? (limit $left s) $(grep '^test result' $R/large_mn.txt) at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf s14call9.tgz r && rm -rf r && echo packed
