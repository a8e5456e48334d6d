#!/usr/bin/env python3
"""Proves a refactor of kernels/ left the machine code alone: every function of the SASS of one
build, normalized and hashed, against those of another build. No GPU needed.

    python3 dev/sass_diff.py dump OUT.json OBJ... [--bodies DIR]   # cuobjdump -sass of .o / .a files
    python3 dev/sass_diff.py compare BEFORE.json AFTER.json           # exit 1 if a body is new

Normalization per function: the `Function : name` header and `.headerflags` are dropped, the
`/*0000*/` address prefixes removed, the `/* 0x... */` encoding words kept (so the scheduling
control bits count too), labels `.L_x_N` renumbered by first appearance (their numbering is
per object file). Branch targets are function-relative offsets: identical code has identical
ones. Mangled names may change (template arguments renamed); bodies must not. `compare`
lists every function of AFTER with the BEFORE function(s) that have the same body, then the
AFTER bodies that match nothing (the failure) and the BEFORE functions that nothing matches
(deleted kernels). --bodies DIR writes each normalized body to DIR/<hash>.sass for a diff.

Needs cuobjdump (and nvdisasm) on PATH or in $CUOBJDUMP; cu++filt, when found, demangles.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")
LABEL = re.compile(r"\.L_x_(\d+)")


def normalize(lines):
    labels = {}

    def relabel(m):
        return ".L_%d" % labels.setdefault(m.group(1), len(labels))

    out = []
    for line in lines:
        s = ADDR.sub("", line).strip()
        if not s or s.startswith(".headerflags") or s.startswith(".section") or s.startswith(".target"):
            continue
        out.append(re.sub(r"\s+", " ", LABEL.sub(relabel, s)))
    return out


def split_functions(text):
    """(name, body lines) per `Function :` block of a cuobjdump -sass dump."""
    funcs = []
    cur, body = None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if cur is not None:
                funcs.append((cur, body))
            cur, body = m.group(1), []
            continue
        if cur is None:
            continue
        if line.startswith("Fatbin ") or re.match(r"\s*(code for|arch =|identifier =)", line):
            funcs.append((cur, body))
            cur, body = None, []
            continue
        body.append(line)
    if cur is not None:
        funcs.append((cur, body))
    return funcs


def demangle(names):
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def dump(args):
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "cuobjdump"
    entries = []
    for obj in args.objects:
        text = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, check=True).stdout
        for name, body in split_functions(text):
            norm = normalize(body)
            h = hashlib.sha256("\n".join(norm).encode()).hexdigest()[:16]
            insts = sum(1 for s in norm if not s.startswith("/*") and not s.startswith(".L_"))
            entries.append({"object": os.path.basename(obj), "name": name, "hash": h, "instructions": insts})
            if args.bodies:
                os.makedirs(args.bodies, exist_ok=True)
                with open(os.path.join(args.bodies, h + ".sass"), "w") as f:
                    f.write("\n".join(norm) + "\n")
    dm = demangle([e["name"] for e in entries])
    for e in entries:
        e["demangled"] = dm.get(e["name"], e["name"])
    with open(args.out, "w") as f:
        json.dump(entries, f, indent=1)
    print(f"{len(entries)} functions from {len(args.objects)} files -> {args.out}")


def compare(args):
    before = json.load(open(args.before))
    after = json.load(open(args.after))
    by_hash = {}
    for e in before:
        by_hash.setdefault(e["hash"], []).append(e)
    matched = set()
    missing = []
    for e in after:
        hits = by_hash.get(e["hash"], [])
        matched.add(e["hash"])
        mark = "same " if hits else "NEW  "
        print(f"{mark}{e['hash']} {e['instructions']:6d}  {e['object']}: {e['demangled']}")
        for h in hits:
            print(f"        = {h['object']}: {h['demangled']}")
        if not hits:
            missing.append(e)
    gone = [e for e in before if e["hash"] not in matched]
    print(f"\nbefore: {len(before)} functions, after: {len(after)}; "
          f"after with a body identical to one before: {len(after) - len(missing)}; new bodies: {len(missing)}")
    if gone:
        print(f"\nbefore, matched by nothing after ({len(gone)}):")
        for e in gone:
            print(f"  {e['hash']} {e['instructions']:6d}  {e['object']}: {e['demangled']}")
    if missing:
        print(f"\nNEW bodies ({len(missing)}):")
        for e in missing:
            print(f"  {e['hash']}  {e['object']}: {e['demangled']}")
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("objects", nargs="+")
    d.add_argument("--bodies")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
