#!/usr/bin/env python3
"""Prints the executable cargo built for tests/NAME.rs, from the JSON messages of
`cargo test --no-run --message-format=json` (the path has a hash), or nothing.

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
    if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == sys.argv[2] \
            and msg.get("executable"):
        exe = msg["executable"]
print(exe)
