#!/usr/bin/env python3
"""Per-kernel SASS instruction counts (wgmma, TMA loads, local-memory spills, stores, setmaxnreg):

    python3 dev/sass_count.py <(cuobjdump -sass libfp8gemm.so)
"""
import re
import sys

cur = None
counts = {}
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1)
        counts[cur] = {k: 0 for k in ("QGMMA", "UTMALDG", "LDL", "STL", "STG", "SETMAXNREG")}
        continue
    if cur is None:
        continue
    for k in counts[cur]:
        if re.search(r"\b" + k + r"\b", line) or (k == "SETMAXNREG" and "USETMAXREG" in line):
            counts[cur][k] += 1
print(f"{'kernel':<70} QGMMA UTMALDG LDL STL STG SETMAXREG")
for f, c in counts.items():
    name = f
    m = re.search(r"(SwapAB|SmallM|WarpSpecialized|Persistent)((?:ILi|Li)[\dLiE]*?)EEELi(\d)EEEv", f)
    if m:
        args = ",".join(re.findall(r"Li(\d+)E", m.group(2) + "E"))
        name = f"gemm {m.group(1)}<{args}> out_mode={m.group(3)}"
    else:
        name = re.sub(r"^_ZN7fp8gemm\d+", "", f)[:60]
    print(f"{name:<70} {c['QGMMA']:5d} {c['UTMALDG']:7d} {c['LDL']:3d} {c['STL']:3d} {c['STG']:3d} {c['SETMAXNREG']:4d}")
