#!/usr/bin/env python3
"""Clocks and power behind each bench measurement.

Joins `BENCH_STAMPS=1 bench` stamps (stderr lines `STAMP <epoch ms> <MxNxK> <hot|cold> <column>`)
with an `nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,
clocks_throttle_reasons.active --format=csv,nounits -lms 100` log of the same run, and prints per
stamp window (from its stamp to the next): samples, median SM clock, mean and max power, and the
share of samples throttled by the software power cap (reason bit 0x4).

    python3 dev/stamp_power.py bench.log smi.csv [--column into] [--min-m 512]
"""
import argparse
import bisect
import datetime as dt
import statistics

SW_POWER_CAP = 0x4


def read_smi(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 6 or not parts[0][:4].isdigit():
                continue  # header or a malformed line
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
            try:
                sm, power, reasons = float(parts[1]), float(parts[3]), int(parts[5], 16)
            except ValueError:
                continue  # "[N/A]" fields
            rows.append((t.timestamp() * 1000.0, sm, power, reasons))
    return rows


def read_stamps(path):
    stamps = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) == 5 and w[0] == "STAMP":
                stamps.append((float(w[1]), w[2], w[3], w[4]))
    return stamps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_log")
    ap.add_argument("smi_csv")
    ap.add_argument("--column", default="into", help="only windows of this column (all: '')")
    ap.add_argument("--min-m", type=int, default=0, help="only shapes with M >= this")
    a = ap.parse_args()
    smi, stamps = read_smi(a.smi_csv), read_stamps(a.bench_log)
    if not smi or not stamps:
        raise SystemExit(f"stamp_power: {len(stamps)} stamps, {len(smi)} nvidia-smi samples: nothing to join")
    times = [r[0] for r in smi]
    print(f"{'shape':>18} {'temp':>4} {'column':>6} {'n':>3} {'SM MHz':>7} {'W mean':>7} {'W max':>6} {'pwr cap':>7}")
    for i, (t0, shape, temp, col) in enumerate(stamps):
        if a.column and col != a.column:
            continue
        if int(shape.split("x")[0]) < a.min_m:
            continue
        t1 = stamps[i + 1][0] if i + 1 < len(stamps) else t0 + 1000.0
        w = smi[bisect.bisect_left(times, t0):bisect.bisect_left(times, t1)]
        if not w:
            print(f"{shape:>18} {temp:>4} {col:>6}   0 (no samples in {t1 - t0:.0f} ms)")
            continue
        cap = sum(1 for r in w if r[3] & SW_POWER_CAP) / len(w)
        print(f"{shape:>18} {temp:>4} {col:>6} {len(w):>3} {statistics.median(r[1] for r in w):>7.0f} "
              f"{statistics.mean(r[2] for r in w):>7.1f} {max(r[2] for r in w):>6.1f} {cap:>6.0%}")


if __name__ == "__main__":
    main()
