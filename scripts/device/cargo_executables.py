#!/usr/bin/env python3
"""Reads cargo's JSON messages (--message-format=json) on stdin and prints one line per built
executable: KIND NAME PATH. Exact paths from cargo's own report, because bench and test binaries
share name prefixes. Tests of member crates are named <crate dir>.<test>
(kernels-train/tests/mixed.rs and tests/mixed.rs are both `mixed`); pipeline-stats.cli finds the
binary beside tests/."""
import json
import sys

PREFIXED = ("kernels-train", "kernels-runtime", "kernels-codegen", "web", "pipeline-stats")

for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        pkg = m["manifest_path"].split("/")[-2]
        kind = m["target"]["kind"][0]
        name = m["target"]["name"]
        if kind == "test" and pkg in PREFIXED:
            name = pkg + "." + name
        print(kind, name, m["executable"])
