#!/usr/bin/env python3
"""amalgamate.py - regenerates the implementation section of pipedream.h from core/.

The core (graph IR, shape inference, profiles, planner, schedule generator,
simulator) is kept as small files in core/; the library build compiles them
one by one. pipedream.h carries the same code, concatenated, behind
PIPEDREAM_IMPLEMENTATION, so that a program can use the core from the one
header (stb style) without linking libpipedream.

    python3 tools/amalgamate.py            rewrite pipedream.h in place
    python3 tools/amalgamate.py --check    exit 1 when pipedream.h is stale
    python3 tools/amalgamate.py --root DIR --output FILE

Only the text between the BEGIN and END marker lines is generated; the public
declarations above them are written by hand.

In one translation unit the files' private names would meet: a name defined
at file scope in more than one core/*.c file (static functions, tables,
typedefs) is renamed for the span of each file with #define/#undef, and every
macro a .c file defines is #undef'ed after it. Local headers are inlined at
their first #include. Python 3 standard library only.
"""
import argparse
import os
import re
import sys

# The order the files are concatenated in. Every core/*.c must be listed here
# or in EXCLUDED (with the reason), so a new file is never left out silently.
SOURCES = [
    "util.c",
    "graph.c",
    "ops.c",
    "api.c",
    "shape_elem.c",
    "shape_nn.c",
    "shape_rnn.c",
    "shape_tensor.c",
    "profile.c",
    "antichain.c",
    "partition.c",
    "schedule.c",
    "simulate.c",
]
EXCLUDED = {}  # file name -> why it is not in the header

BEGIN = "/* ==== BEGIN GENERATED IMPLEMENTATION (tools/amalgamate.py; edit core/, not this) ==== */"
END = "/* ==== END GENERATED IMPLEMENTATION ==== */"

INCLUDE_LOCAL = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
DEFINE = re.compile(r"^#\s*define\s+([A-Za-z_]\w*)")
STATIC = re.compile(r"^static\b([^=;(\[{]*)[=;(\[{]")
TYPEDEF_END = re.compile(r"^}\s*([A-Za-z_]\w*)\s*;")
TYPEDEF_ONE = re.compile(r"^typedef\b[^{;]*?\b([A-Za-z_]\w*)\s*(\)\s*\(.*)?;")
TAG = re.compile(r"^(?:typedef\s+)?(?:struct|union|enum)\s+([A-Za-z_]\w*)\s*\{")
IDENT = re.compile(r"[A-Za-z_]\w*")


def file_scope_names(lines):
    """Names a .c file defines at file scope with internal linkage (or as types)."""
    names = set()
    for ln in lines:
        m = STATIC.match(ln)
        if m:
            ids = IDENT.findall(m.group(1))
            if ids:
                names.add(ids[-1])
            continue
        for rx in (TYPEDEF_END, TAG):
            m = rx.match(ln)
            if m:
                names.add(m.group(1))
        m = TYPEDEF_ONE.match(ln)
        if m and "(" not in ln:
            names.add(m.group(1))
    return names


def macros_defined(lines):
    return [m.group(1) for m in (DEFINE.match(ln) for ln in lines) if m]


class Amalgamator:
    def __init__(self, core):
        self.core = core
        self.seen = set()

    def read(self, name):
        with open(os.path.join(self.core, name), encoding="utf-8") as f:
            return f.read().splitlines()

    def expand(self, name, out):
        """Appends file `name` (relative to core/) to out, inlining local headers once."""
        for ln in self.read(name):
            m = INCLUDE_LOCAL.match(ln)
            if not m:
                out.append(ln)
                continue
            inc = os.path.normpath(os.path.join(os.path.dirname(name), m.group(1)))
            if inc == os.path.normpath("../pipedream.h"):
                out.append("/* #include \"pipedream.h\": the declarations above */")
                continue
            if inc.startswith(".."):
                sys.exit("amalgamate.py: core/%s includes %s, outside core/" % (name, m.group(1)))
            if inc in self.seen:
                continue
            self.seen.add(inc)
            out.append("/* ---- core/%s ---- */" % inc)
            self.expand(inc, out)
            out.append("/* ---- end of core/%s ---- */" % inc)


def generate(root):
    core = os.path.join(root, "core")
    present = sorted(f for f in os.listdir(core) if f.endswith(".c"))
    missing = [f for f in present if f not in SOURCES and f not in EXCLUDED]
    gone = [f for f in SOURCES if f not in present]
    if missing or gone:
        msg = []
        if missing:
            msg.append("core/ files not listed in tools/amalgamate.py SOURCES or EXCLUDED: " + ", ".join(missing))
        if gone:
            msg.append("files in SOURCES that core/ no longer has: " + ", ".join(gone))
        sys.exit("amalgamate.py: " + "; ".join(msg))

    am = Amalgamator(core)
    texts = {f: am.read(f) for f in SOURCES}
    owners = {}
    for f in SOURCES:
        for n in file_scope_names(texts[f]):
            owners.setdefault(n, []).append(f)
    clashes = {n for n, fs in owners.items() if len(fs) > 1}

    out = []
    for f in SOURCES:
        stem = os.path.splitext(f)[0]
        local = sorted(n for n in file_scope_names(texts[f]) if n in clashes)
        out.append("")
        out.append("/* ==== core/%s ==== */" % f)
        for n in local:
            out.append("#define %s pd__%s_%s" % (n, stem, n))
        am.expand(f, out)
        undef = sorted(set(local) | set(macros_defined(texts[f])))
        for n in undef:
            out.append("#undef %s" % n)
    return "\n".join(out).strip("\n") + "\n"


def splice(header_text, body):
    lines = header_text.splitlines(keepends=True)
    try:
        b = next(i for i, ln in enumerate(lines) if ln.rstrip("\n") == BEGIN)
        e = next(i for i, ln in enumerate(lines) if ln.rstrip("\n") == END and i > b)
    except StopIteration:
        sys.exit("amalgamate.py: pipedream.h lacks the marker lines\n  %s\n  %s" % (BEGIN, END))
    return "".join(lines[: b + 1]) + body + "".join(lines[e:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the source tree (default: this script's parent folder)")
    ap.add_argument("--output", help="write here instead of ROOT/pipedream.h")
    ap.add_argument("--check", action="store_true",
                    help="compare with the committed pipedream.h; exit 1 when it differs")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    path = os.path.join(root, "pipedream.h")
    with open(path, encoding="utf-8") as f:
        cur = f.read()
    new = splice(cur, generate(root))
    if a.check:
        if new != cur:
            import difflib
            diff = list(difflib.unified_diff(cur.splitlines(), new.splitlines(), "pipedream.h (committed)",
                                             "pipedream.h (generated)", lineterm="", n=1))
            sys.stderr.write("\n".join(diff[:40]) + "\n")
            sys.stderr.write(
                "\npipedream.h is out of date with core/ (%d diff lines, first 40 above).\n"
                "Regenerate it and commit the result:\n\n    python3 tools/amalgamate.py\n" % len(diff))
            return 1
        print("pipedream.h is up to date with core/")
        return 0
    dst = a.output or path
    if not (a.output is None and new == cur):
        with open(dst, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
