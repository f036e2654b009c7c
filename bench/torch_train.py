#!/usr/bin/python3
"""Time PyTorch CPU training steps of a fixture model: the baseline for bench/bench_train.

    /usr/bin/python3 bench/torch_train.py MODEL [--batch B] [--threads T] [--iters I] [--warmup W]

The model is rebuilt by tests/fixtures/gen_fixtures.py (same weights as the
fixture's model.onnx) and trained in train mode with torch.optim.SGD (lr 0.01)
on random inputs and class labels: one step = zero_grad, forward, cross-entropy
(over the last axis), backward, optimizer step. The median step time after W
warm-up steps is reported as one JSON line:

    {"model": "mlp", "batch": 64, "threads": 1, "samples_per_s": ..., "ms_per_step": ...}
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
import gen_fixtures  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="Time PyTorch CPU training steps of a fixture model.")
    ap.add_argument("model", choices=gen_fixtures.MODELS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, x = gen_fixtures.build(args.model, batch=args.batch)
    model.train()
    with torch.no_grad():
        out = model(x)
    classes = out.shape[-1]
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, classes, out.shape[:-1], generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1))
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if i >= args.warmup:
            times.append(t1 - t0)
    med = statistics.median(times)
    print(json.dumps({"model": args.model, "batch": args.batch, "threads": args.threads,
                      "samples_per_s": round(args.batch / med, 1), "ms_per_step": round(med * 1e3, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
