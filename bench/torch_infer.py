#!/usr/bin/python3
"""Time PyTorch CPU inference of a fixture model: the baseline for pdonnx's C side.

    /usr/bin/python3 bench/torch_infer.py MODEL [--batch B] [--threads T] [--iters I] [--warmup W]

MODEL is one of the fixtures in tests/fixtures (mlp, cnn_bn, resnet, gpt). The model
is rebuilt by tests/fixtures/gen_fixtures.py's build() with the same seed, so it has
the same weights as tests/fixtures/MODEL/model.onnx; before timing, its output on the
fixture's x.npy is compared with y.npy and the script stops (exit 2) if they differ.

The model runs in eval mode under torch.no_grad() with torch.set_num_threads(T) on a
batch of B inputs (digits images for mlp and cnn_bn, random data for resnet, random
token ids for gpt). After W untimed warm-up calls, each of I calls is timed on its
own with time.perf_counter(); the median is reported. Prints one line of JSON:

    {"model": "mlp", "batch": 64, "threads": 1, "samples_per_s": ..., "ms_per_batch": ...}
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")
sys.path.insert(0, FIXTURES)
import gen_fixtures  # noqa: E402


def check_against_fixture(name):
    """Exit 2 unless the rebuilt model reproduces the fixture's y.npy."""
    d = os.path.join(FIXTURES, name)
    x, y = np.load(os.path.join(d, "x.npy")), np.load(os.path.join(d, "y.npy"))
    model, _ = gen_fixtures.build(name, batch=x.shape[0])
    with torch.no_grad():
        got = model(torch.from_numpy(x)).numpy()
    err = float(np.abs(got - y).max())
    if not err < 1e-5:
        sys.stderr.write("torch_infer: %s rebuilt differs from the fixture (max %.3g)\n" % (name, err))
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Time PyTorch CPU inference of a fixture model.")
    ap.add_argument("model", choices=gen_fixtures.MODELS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if args.batch < 1 or args.threads < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("batch, threads and iters must be >= 1, warmup >= 0")

    torch.set_num_threads(args.threads)
    check_against_fixture(args.model)
    model, x = gen_fixtures.build(args.model, batch=args.batch)

    times = []
    with torch.no_grad():
        for i in range(args.warmup + args.iters):
            t0 = time.perf_counter()
            model(x)
            t1 = time.perf_counter()
            if i >= args.warmup:
                times.append(t1 - t0)
    med = statistics.median(times)
    print(
        json.dumps(
            {
                "model": args.model,
                "batch": args.batch,
                "threads": args.threads,
                "samples_per_s": round(args.batch / med, 1),
                "ms_per_batch": round(med * 1e3, 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
