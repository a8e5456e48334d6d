#!/bin/bash
# Session 17, call 3: the late PDL trigger (CANDLE_FP8_LATE_TRIGGER=1: the next kernel launches
# once every CTA is past its main loop) against the default (after the producer's last load):
# bench rows (ours / into / full) of the decode-size shapes, the trace of the q|k|v chain, decode.
source scripts/dev/call_prelude.sh
timeout 60 env CANDLE_FP8_LATE_TRIGGER=1 $BIN/bench_trace --shapes 1,10240,5120 --no-cold --no-check --samples 10 \
  --settle-ms 100 --columns into --trace-out $R/t.bin > $R/tb-late.txt 2>&1
python3 scripts/dev/trace_timeline.py $R/t.bin --chain 12 --ctas $R/ctas-qkv-into-late.csv > $R/tt-late.txt 2>&1
rm -f $R/t.bin
SH="1,10240,5120 16,10240,5120 32,10240,5120 1,5120,8192 16,5120,8192 1,51200,5120 16,51200,5120 1,5120,25600 16,5120,25600 1,4096,4096 16,4096,4096 32,4096,4096"
for r in 1 2; do
  for v in CANDLE_FP8_LATE_TRIGGER=0 CANDLE_FP8_LATE_TRIGGER=1; do
    env $v timeout 250 $BIN/bench --shapes $SH --no-check --columns ours,into,full --samples 15 > "$R/bench-$v-r$r.txt" 2>&1
    echo "bench $v r$r rc=$? at $(elapsed)"
  done
done
OUT=$R/dec REPEAT=2 bash scripts/dev/decode_sweep.sh "CANDLE_FP8_LATE_TRIGGER=0 CANDLE_FP8_LATE_TRIGGER=1" "1 16" > $R/decode.txt 2>&1
echo "decode at $(elapsed)"
sed -n 1,5p $R/tt-late.txt
python3 - "$R" <<'PY'
import sys, re, glob, collections
R = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(f"{R}/bench-*.txt")):
    v = re.search(r"TRIGGER=(\d)-r(\d)", f).groups()
    shape = None
    for line in open(f):
        if line.startswith("== custom"):
            shape = line.split(":")[1].split("(")[0].strip()
        m = re.match(r"\s+m=(\d+)\s+(hot|cold)\s+ours\s+(\S+)\s+into\s+(\S+).*full\s+(\S+)", line)
        if m:
            rows[(shape, m.group(1), m.group(2))][v] = (m.group(3), m.group(4), m.group(5))
print(f"{'shape':22} {'m':>3} {'temp':4} | early r1 ours/into/full | early r2 | late r1 | late r2")
for k, d in rows.items():
    cells = [ "/".join(d.get((t, r), ("-",)*3)) for t in "01" for r in "12"]
    print(f"{k[0]:22} {k[1]:>3} {k[2]:4} | " + " | ".join(cells))
PY
cat $R/dec/sweep-table.txt
pack_out s17call3
