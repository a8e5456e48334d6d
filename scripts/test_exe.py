#!/usr/bin/env python3
"""Prints the executable cargo built for tests/NAME.rs, from the JSON messages of
`cargo test --no-run --message-format=json` (the path has a hash); exits 1 with a message on
stderr when there is none.

    python3 scripts/test_exe.py BUILD.json NAME
"""
import json
import sys

exe = ""
for line in open(sys.argv[1]):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    target = msg.get("target", {})
    if (msg.get("reason") == "compiler-artifact" and target.get("name") == sys.argv[2]
            and "test" in target.get("kind", []) and msg.get("executable")):
        exe = msg["executable"]
if not exe:
    sys.exit(f"test_exe: no test executable for tests/{sys.argv[2]}.rs in {sys.argv[1]}")
print(exe)
