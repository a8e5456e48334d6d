#!/bin/bash
# Session 26, call 5 (bundle route, the last device minutes): the spread of three rows of call 4's
# table — q|k|v 32 ("into" hot 18.44 vs cold 15.93 there; call 3: 15.47-16.30 hot), down 128 (a
# miss in call 4 at 0.95 / 0.90 against our cuBLASLt provider), gate_up 128 — three runs, same binary.
source scripts/dev/call_prelude.sh
for r in 1 2 3; do
  timeout 60 $BIN/bench --shapes 32,10240,5120 128,5120,25600 128,51200,5120 --columns ours,into,lt --samples 15 --json $R/spread-r$r.json > $R/spread-r$r.txt 2>&1
  echo "run $r rc=$? at $(elapsed)"
done
python3 - <<'PY'
import json, os
R = os.environ["OUT"] + "/r"
for r in (1, 2, 3):
    for row in json.load(open(f"{R}/spread-r{r}.json"))["rows"]:
        print(r, row["m"], row["n"], row["k"], row["temp"], *(f"{k}={row.get(k)}" for k in ("ours_us", "ours_into_us", "cublaslt_us")))
PY
pack_out s26call5
