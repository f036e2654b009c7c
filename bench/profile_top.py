"""The top of a `pdonnx profile -o PROFILE.json`: the N costliest nodes and
the time per op type, forward plus backward ms, with each op's share. With a
second profile of the same model (another thread count, another build): the
time per op type in both and the first's over the second's, the op types
that gain least first.

    python3 bench/profile_top.py PROFILE.json [N]
    python3 bench/profile_top.py ONE.json TWO.json [N]
"""
import collections
import json
import sys


def total(n):
    return n["fwd_ms"] + n["bwd_in_ms"] + n["bwd_w_ms"]


def by_op(nodes):
    ops = collections.Counter()
    for n in nodes:
        ops[n["desc"].split()[0]] += total(n)
    return ops


def main():
    args = sys.argv[1:]
    files = [a for a in args if a.endswith(".json")]
    top = int(next((a for a in args if not a.endswith(".json")), 10))
    nodes = json.load(open(files[0]))["nodes"]
    whole = sum(map(total, nodes))
    if len(files) == 2:
        other = by_op(json.load(open(files[1]))["nodes"])
        ops = by_op(nodes)
        print("sum of nodes %.1f ms / %.1f ms = %.2f" % (whole, sum(other.values()), whole / sum(other.values())))
        print("  %-20s %9s %9s %6s" % ("op", "one ms", "two ms", "ratio"))
        rows = [(op, ms, other.get(op, 0.0)) for op, ms in ops.most_common(top)]
        for op, a, b in sorted(rows, key=lambda r: r[1] / r[2] if r[2] else 0):
            print("  %-20s %9.1f %9.1f %6.2f" % (op, a, b, a / b if b else float("inf")))
        return
    print("sum of nodes %.1f ms" % whole)
    for n in sorted(nodes, key=total, reverse=True)[:top]:
        print("  %-48s %-10s %8.2f" % (n["name"][-48:], n["desc"].split()[0], total(n)))
    for op, ms in by_op(nodes).most_common(top):
        print("  %-20s %8.1f ms %5.1f%%" % (op, ms, 100 * ms / whole))


if __name__ == "__main__":
    main()
