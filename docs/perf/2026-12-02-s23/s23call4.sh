#!/bin/bash
# Session 23, call 4 (harness route). Call 3: at large M every tile runs at the ~690 W board cap
# (clock 1440-1605 MHz; 66 CTAs: 1980 MHz, 593 W), so time = energy per GEMM / 690 W, and 2-CTA
# multicast saved no energy. Does the operand data change the energy? examples/bench.rs times
# uniform e4m3 codes ("content does not matter for speed"), the peers (anchors.py) randn
# quantized by amax, as harness.py does. Prediction: uniform codes toggle more multiplier bits:
# a few % more energy, i.e. a few % slower at M >= 512 in our table than with the peers' data.
# Also torch's cuBLASLt blockwise on the same operands (its energy per GEMM), and whether DeepGEMM
# is importable here.
source scripts/dev/harness_prelude.sh
python3 -c "import deep_gemm, sys; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -1
pip list 2>/dev/null | grep -i -E "gemm|flashinfer|vllm|sgl" | head
for d in randn codes zeros; do
  $H --lib /tmp/lib_plain.so power --data $d --only persistent256x128s3,persistent128x128s5,torch_lt \
    --shapes 4096,4096,4096 2048,4096,4096 > $O/power-$d.txt 2>&1
  echo "data $d done $(( $(date +%s) - T0 )) s"
done
grep -h -E "Error|error|Traceback" $O/power-*.txt | head -5
grep -h "^POWER [0-9]" $O/power-*.txt
