#!/usr/bin/env python3
"""cuda_bench.py - issue 6's benchmark on one GPU: pdonnx --device cuda next to
PyTorch eager (and torch.compile where it works) training the same models with
the same batch and precision, in the same run. Driven by bench/run_cuda.sh.

    python3 bench/cuda_bench.py --build BUILD_DIR [--out DIR] [--models gpt,resnet]
           [--precisions bf16,fp32] [--iters 5] [--warmup 3] [--gpt-batch 4] [--resnet-batch 32]
           [--no-compile] [--budget SECONDS]

Models (built here, exported to ONNX with PyTorch's TorchScript exporter):
  gpt     GPT-2-small-shaped: 12 layers, width 768, 12 heads, T = 1024, vocab
          50257, learned positions, untied LM head (tests/fixtures/gen_fixtures.py's
          GPT at that size; its causal mask is an added constant)
  resnet  ResNet-50-shaped: bottlenecks [3, 4, 6, 3], 224x224 RGB, 1000 classes,
          BatchNorm in training mode

One training step everywhere: forward, softmax cross-entropy over the last
axis against fixed labels, backward, SGD (lr 0.01). Timings: median of
--iters steps after --warmup steps, wall clock with the GPU synchronized
every step (pdonnx's step waits for its loss anyway).

Precision: fp32 is full fp32 everywhere (PyTorch with TF32 off); bf16 is, for
pdonnx, fp32 storage with cuBLAS products on bf16 tensor cores
(COMPUTE_32F_FAST_16BF) and convolutions in TF32, and for PyTorch autocast to
bf16 (bf16 activations, fp32 master weights): not the same arithmetic, the
same intent (docs/CUDA.md).

MFU (GPT only): 6 * N * tokens per step (N: parameters, embeddings included,
the attention's T^2 products left out as in the 6ND convention) over the
step time, against a bf16 matmul rate measured here (torch.matmul of 8192^3
in bf16), printed with the table. For fp32 rows the same denominator is used
(a low number by construction).

Every run is a subprocess with its own time limit, so one that fails or hangs
leaves a "failed"/"timeout" cell and the rest of the table. No network, no
pip: python3 with torch and onnx, and a built pdonnx (bench/bench_train).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
START = time.time()


# ---------------------------------------------------------------------------------------------
# models


def gpt_model():
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    import gen_fixtures  # the fixture GPT (tests/fixtures), here at GPT-2 small's size

    import torch

    torch.manual_seed(0)
    return gen_fixtures.GPT(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)


def resnet50_model():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            cout = mid * 4
            self.c1 = nn.Conv2d(cin, mid, 1, bias=False)
            self.b1 = nn.BatchNorm2d(mid)
            self.c2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
            self.b2 = nn.BatchNorm2d(mid)
            self.c3 = nn.Conv2d(mid, cout, 1, bias=False)
            self.b3 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            y = F.relu(self.b2(self.c2(y)))
            y = self.b3(self.c3(y))
            return F.relu(y + (self.down(x) if self.down is not None else x))

    class ResNet50(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
            layers, cin = [], 64
            for mid, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(n):
                    layers.append(Bottleneck(cin, mid, stride if i == 0 else 1))
                    cin = mid * 4
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    return ResNet50()


def build(name, batch):
    import torch
    import torch.nn as nn

    if name == "gpt":
        m = gpt_model()
        x = torch.randint(0, 50257, (batch, 1024), generator=torch.Generator().manual_seed(1))
    else:
        m = resnet50_model()
        x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    # non-default normalization parameters and statistics: the exporter would
    # otherwise deduplicate the equal initializers (ones, zeros) and tie them
    # through Identity nodes (tests/fixtures/gen_fixtures.py says the same)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.LayerNorm, nn.BatchNorm2d)):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.1, 0.1)
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return m, x


def labels_for(logits_shape):
    """bench_train's labels: (i * 7919) mod classes over the positions."""
    import torch

    n = 1
    for d in logits_shape[:-1]:
        n *= d
    return (torch.arange(n, dtype=torch.int64) * 7919 % logits_shape[-1]).view(*logits_shape[:-1])


# ---------------------------------------------------------------------------------------------
# subcommands (each prints one JSON line)


def cmd_export(a):
    import numpy as np
    import torch

    m, x = build(a.model, a.batch)
    m.eval()
    path = os.path.join(a.out, a.model + ".onnx")
    kw = dict(export_params=True, opset_version=17, do_constant_folding=True, input_names=["x"],
              output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
              training=torch.onnx.TrainingMode.EVAL)
    # keep BatchNorm as its own node (the exporter folds it into Conv in eval mode)
    orig = getattr(torch._C, "_jit_pass_onnx_eval_peephole", None)
    if orig is not None:
        torch._C._jit_pass_onnx_eval_peephole = lambda graph, params: params
    how = "torchscript"
    try:
        with torch.no_grad():
            try:
                try:
                    torch.onnx.export(m, (x[:1],), path, dynamo=False, **kw)  # the TorchScript exporter
                except TypeError:  # a torch without the dynamo argument
                    torch.onnx.export(m, (x[:1],), path, **kw)
            except Exception as e:  # a torch whose TorchScript exporter is gone: the dynamo one, fixed batch
                sys.stderr.write("TorchScript export failed (%s); trying dynamo=True\n" % e)
                how = "dynamo"
                torch.onnx.export(m, (x,), path, opset_version=18, input_names=["x"], output_names=["y"], dynamo=True)
    finally:
        if orig is not None:
            torch._C._jit_pass_onnx_eval_peephole = orig
    np.save(os.path.join(a.out, a.model + "_x.npy"), x.numpy())
    params = sum(p.numel() for p in m.parameters())
    print(json.dumps({"model": a.model, "onnx": path, "params": params, "bytes": os.path.getsize(path),
                      "exporter": how}))


def cmd_torch(a):
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
    dev = torch.device("cuda")
    m, x = build(a.model, a.batch)
    m = m.to(dev).train()
    for mod in m.modules():  # the GPT's causal mask is a plain tensor attribute (not a buffer): .to() skips it
        if torch.is_tensor(getattr(mod, "mask", None)):
            mod.mask = mod.mask.to(dev)
    x = x.to(dev)
    with torch.no_grad():
        classes = m(x[:1]).shape[-1]
    shape = list(x.shape[:1]) + ([1024] if a.model == "gpt" else []) + [classes]
    y = labels_for(shape).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    step_model = torch.compile(m) if a.compile else m
    ac = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        opt.zero_grad(set_to_none=True)
        with ac:
            logits = step_model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, classes), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"model": a.model, "batch": a.batch, "precision": a.precision, "compile": a.compile,
                      "samples_per_s": a.batch / med, "ms_per_step": med * 1e3}))


def cmd_peak(a):
    import torch

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        x @ y
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"bf16_tflops": 2 * n ** 3 * reps / dt / 1e12, "device": torch.cuda.get_device_name(0),
                      "torch": torch.__version__}))


# ---------------------------------------------------------------------------------------------
# the driver


def run(cmd, limit, env=None):
    """One JSON line from a subprocess, or {"error": why}."""
    limit = max(10, min(limit, left()))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timeout (%ds)" % limit}
    sys.stderr.write("  %.0fs: %s\n" % (time.time() - t0, " ".join(os.path.basename(c) if i == 0 else c
                                                                     for i, c in enumerate(cmd))))
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = (p.stderr or p.stdout).strip().splitlines()
    return {"error": "failed (rc %d): %s" % (p.returncode, tail[-1][:200] if tail else "")}


BUDGET = 570.0


def left():
    return BUDGET - (time.time() - START)


def main():
    global BUDGET
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", nargs="?", default="all", choices=["all", "export", "torch", "peak"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default="/tmp/pdonnx-cuda-bench")
    ap.add_argument("--models", default="gpt,resnet")
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gpt-batch", type=int, default=4)
    ap.add_argument("--resnet-batch", type=int, default=32)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--ld-path", default="", help="LD_LIBRARY_PATH for bench_train (run_cuda.sh sets it)")
    ap.add_argument("--budget", type=float, default=BUDGET, help="seconds for the whole run (default 570)")
    # the subcommands' own arguments
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    BUDGET = a.budget
    os.makedirs(a.out, exist_ok=True)
    if a.cmd == "export":
        return cmd_export(a)
    if a.cmd == "torch":
        return cmd_torch(a)
    if a.cmd == "peak":
        return cmd_peak(a)

    me = [sys.executable, os.path.abspath(__file__)]
    bench = os.path.join(a.build, "bench", "bench_train")
    if not os.path.exists(bench):
        sys.exit("no %s: build pdonnx with -Dcuda=enabled first (bench/run_cuda.sh does)" % bench)
    peak = run(me + ["peak"], 60)
    tflops = peak.get("bf16_tflops")
    print("device: %s; torch %s; measured bf16 matmul rate (8192^3): %s" % (
        peak.get("device", "?"), peak.get("torch", "?"), "%.0f TFLOP/s" % tflops if tflops else peak.get("error")))
    print("steps: median of %d after %d warm-up; SGD lr 0.01; cross-entropy; same batch everywhere\n" % (
        a.iters, a.warmup))
    rows = []
    for model in a.models.split(","):
        batch = a.gpt_batch if model == "gpt" else a.resnet_batch
        ex = run(me + ["export", "--model", model, "--batch", str(batch), "--out", a.out], 180)
        if "error" in ex:
            rows.append((model, batch, "-", {"error": "export " + ex["error"]}, {}, {}, None))
            continue
        tokens = batch * 1024 if model == "gpt" else None
        for prec in a.precisions.split(","):
            common = ["--iters", str(a.iters), "--warmup", str(a.warmup)]
            env = dict(os.environ)
            if a.ld_path:
                env["LD_LIBRARY_PATH"] = a.ld_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            ours = run([bench, ex["onnx"], os.path.join(a.out, model + "_x.npy"), "--batch", str(batch),
                        "--device", "cuda", "--precision", prec, "--name", model] + common, 200, env=env)
            eager = run(me + ["torch", "--model", model, "--batch", str(batch), "--precision", prec] + common, 120)
            flops = 6.0 * ex["params"] * tokens if tokens else None
            rows.append((model, batch, prec, ours, eager, {"error": "skipped (time)" if not a.no_compile else "-"},
                         flops))
    # torch.compile last, while the budget lasts (its compile alone can take minutes)
    for i, (model, batch, prec, ours, eager, comp, flops) in enumerate(rows):
        if a.no_compile or prec == "-" or left() < 150:
            continue
        comp = run(me + ["torch", "--compile", "--model", model, "--batch", str(batch), "--precision", prec,
                         "--iters", str(a.iters), "--warmup", str(a.warmup)], 150)
        rows[i] = (model, batch, prec, ours, eager, comp, flops)

    def sps(r):
        return "%.1f" % r["samples_per_s"] if "samples_per_s" in r else r.get("error", "-")

    def mfu(r, flops):
        if not flops or not tflops or "ms_per_step" not in r:
            return "-"
        return "%.1f%%" % (100 * flops / (r["ms_per_step"] * 1e-3) / (tflops * 1e12))

    def ratio(a_, b_):
        if "ms_per_step" in a_ and "ms_per_step" in b_:
            return "%.2f" % (b_["ms_per_step"] / a_["ms_per_step"])
        return "-"

    print("| model | batch | precision | pdonnx samples/s | PyTorch eager | torch.compile | pdonnx MFU | eager MFU "
          "| pdonnx / eager | pdonnx / compile |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, batch, prec, ours, eager, comp, flops in rows:
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            model, batch, prec, sps(ours), sps(eager), sps(comp), mfu(ours, flops), mfu(eager, flops),
            ratio(ours, eager), ratio(ours, comp)))
    print("\n(total %.0f s; ratios are speed-ups: > 1 means pdonnx is faster)" % (time.time() - START))


if __name__ == "__main__":
    main()
