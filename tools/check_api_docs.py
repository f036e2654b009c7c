#!/usr/bin/env python3
"""check_api_docs.py - every public function of pipedream.h is described in docs/API.md.

    python3 tools/check_api_docs.py [ROOT]

Exits 1 naming the functions the header declares (PDDEF) that docs/API.md
does not mention as `name(`, and the ones it describes that the header no
longer declares. Python 3 standard library only.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
with open(os.path.join(root, "pipedream.h"), encoding="utf-8") as f:
    header = f.read()
header = header[: header.index("#endif /* PIPEDREAM_H */")]
with open(os.path.join(root, "docs", "API.md"), encoding="utf-8") as f:
    doc = f.read()

declared = re.findall(r"PDDEF[^;]*?\b(pd_\w+)\s*\(", header)
described = set(re.findall(r"\b(pd_\w+)\(", doc))
missing = [n for n in declared if n not in described]
stale = sorted(n for n in described - set(declared) if re.search(r"`[^`]*\b%s\(" % n, doc))
if missing:
    print("docs/API.md does not describe: " + ", ".join(missing))
if stale:
    print("docs/API.md describes functions pipedream.h does not declare: " + ", ".join(stale))
if missing or stale:
    sys.exit(1)
print("docs/API.md describes all %d functions of pipedream.h" % len(declared))
