#!/usr/bin/env python3
"""zoo_bench.py - PyTorch's side of bench/run_zoo.sh: one zoo model
(tests/zoo/gen_zoo.py's families, the same configuration and mode) trained
with plain SGD at a batch and thread count; prints one JSON line with the
median step time.

    python3 bench/zoo_bench.py MODEL --batch 32 --threads 1 [--iters 20] [--warmup 3]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "zoo"))
import gen_zoo  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=list(gen_zoo.MODELS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, make_x, train_mode = gen_zoo.MODELS[a.model]()
    gen_zoo.perturb(model, 1)
    model.train(train_mode)
    g = torch.Generator().manual_seed(2)
    x = make_x(a.batch, g)
    with torch.no_grad():
        out = model(x)
    y = torch.randint(0, out.shape[-1], out.shape[:-1], generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=gen_zoo.LR.get(a.model, 0.05))
    times = []
    for i in range(a.warmup + a.iters):
        t0 = time.perf_counter()
        opt.zero_grad()
        o = model(x)
        loss = F.cross_entropy(o.reshape(-1, o.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads, "torch": torch.__version__,
                      "ms_per_step": round(med * 1e3, 4)}))


if __name__ == "__main__":
    main()
