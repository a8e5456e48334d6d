#!/bin/bash
# Session 17, call 4: the paced producer thread waits with try_wait (suspends) instead of
# polling test_wait — new build vs the previous one (bench_old / decode_old): bench rows of the
# decode-size shapes, the q|k|v "into" trace, decode b1 / b16.
source scripts/dev/call_prelude.sh
for b in bench_trace bench_trace_old; do
  timeout 60 $BIN/$b --shapes 1,10240,5120 --no-cold --no-check --samples 10 --settle-ms 100 --columns into --trace-out $R/t.bin > $R/tb-$b.txt 2>&1
  python3 scripts/dev/trace_timeline.py $R/t.bin --chain 12 --ctas $R/ctas-qkv-into-$b.csv > $R/tt-$b.txt 2>&1
  rm -f $R/t.bin
done
SH="1,10240,5120 16,10240,5120 32,10240,5120 1,5120,8192 16,5120,8192 1,51200,5120 16,51200,5120 1,5120,25600 16,5120,25600 1,4096,4096 16,4096,4096 32,4096,4096"
for r in 1 2; do
  for b in bench bench_old; do
    timeout 250 $BIN/$b --shapes $SH --no-check --columns ours,into,full --samples 15 > "$R/bench-$b-r$r.txt" 2>&1
    echo "$b r$r rc=$? at $(elapsed)"
  done
done
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "X=new DECODE_BIN=$BIN/decode_old" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
for b in bench_trace bench_trace_old; do sed -n 1,5p $R/tt-$b.txt; done
python3 - "$R" <<'PY'
import sys, re, glob, collections
R = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(f"{R}/bench-*.txt")):
    v = re.search(r"bench-(bench(?:_old)?)-r(\d)", f).groups()
    shape = None
    for line in open(f):
        if line.startswith("== custom"):
            shape = line.split(":")[1].split("(")[0].strip()
        m = re.match(r"\s+m=(\d+)\s+(hot|cold)\s+ours\s+(\S+)\s+into\s+(\S+).*full\s+(\S+)", line)
        if m:
            rows[(shape, m.group(1), m.group(2))][v] = (m.group(3), m.group(4), m.group(5))
print(f"{'shape':22} {'m':>3} {'temp':4} | new r1 ours/into/full | new r2 | old r1 | old r2")
for k, d in rows.items():
    cells = ["/".join(d.get((t, r), ("-",) * 3)) for t in ("bench", "bench_old") for r in "12"]
    print(f"{k[0]:22} {k[1]:>3} {k[2]:4} | " + " | ".join(cells))
PY
cat $R/dec/sweep-table.txt
pack_out s17call4
