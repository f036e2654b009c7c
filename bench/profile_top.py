"""The top of a `pdonnx profile -o PROFILE.json`: the N costliest nodes and
the time per op type, forward plus backward ms, with each op's share.

    python3 bench/profile_top.py PROFILE.json [N]
"""
import collections
import json
import sys


def total(n):
    return n["fwd_ms"] + n["bwd_in_ms"] + n["bwd_w_ms"]


def main():
    nodes = json.load(open(sys.argv[1]))["nodes"]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    whole = sum(map(total, nodes))
    print("sum of nodes %.1f ms" % whole)
    for n in sorted(nodes, key=total, reverse=True)[:top]:
        print("  %-48s %-10s %8.2f" % (n["name"][-48:], n["desc"].split()[0], total(n)))
    by_op = collections.Counter()
    for n in nodes:
        by_op[n["desc"].split()[0]] += total(n)
    for op, ms in by_op.most_common(top):
        print("  %-20s %8.1f ms %5.1f%%" % (op, ms, 100 * ms / whole))


if __name__ == "__main__":
    main()
