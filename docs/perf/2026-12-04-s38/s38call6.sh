#!/bin/bash
# Session 38 call 6: SASS of every kernel of HEAD (cubins compiled here with
# `nvcc -gencode arch=compute_90a,code=sm_90a -O3 -cubin -Xptxas -v`, one per kernels/*.cu, carried
# in bundle/dev/cubins): per-kernel QGMMA / UTMALDG / LDL / STL counts (scripts/dev/sass_count.py).
mkdir -p $OUT/r
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -n 1)
echo "cuobjdump: $CUOBJDUMP" > $OUT/log.txt
for c in bundle/dev/cubins/*.cubin; do
  b=$(basename $c .cubin)
  "$CUOBJDUMP" -sass $c > /tmp/$b.sass 2>&1
  python3 scripts/dev/sass_count.py /tmp/$b.sass > $OUT/r/sass-$b.txt
  echo "$b: $(($(wc -l < $OUT/r/sass-$b.txt) - 1)) kernels" >> $OUT/log.txt
done
# GEMM kernels (those with QGMMA), and any kernel with local-memory traffic.
cat $OUT/r/sass-*.txt | awk '$1 != "kernel" { n++; if ($(NF-5) > 0) g++; if ($(NF-3) + $(NF-2) > 0) { l++; print "LOCAL: " $0 } }
  END { printf "kernels %d, with QGMMA %d, with LDL/STL %d\n", n, g, l }' >> $OUT/log.txt
cat $OUT/log.txt
