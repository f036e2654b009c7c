"""Realistic-size training benchmarks: the PyTorch 2.x side of bench/run_realistic.sh.

    python bench/torch_realistic.py export MODEL DIR      # DIR/model.onnx, DIR/x.npy
    python bench/torch_realistic.py time MODEL --threads T [--iters I] [--warmup W]

MODEL is one of:
  resnet18  torchvision's ResNet-18 layout (BasicBlock [2,2,2,2], 7x7 stem, max
            pool), 10 classes, 32x32 images, batch 32, BatchNorm in train mode
  vit       ViT: 4x4 patches of 32x32 images (64 tokens + class token), width
            192, 6 pre-norm blocks of 3 heads and MLP 768, batch 32
  gpt       GPT: 4 pre-norm causal blocks of width 256 (4 heads, MLP 1024),
            vocabulary 1024, T=128, batch 8, the loss over every position
  mlp       784-1024-1024-10 with ReLU, batch 128

Both sides train the same exported weights the same way: SGD with momentum
0.9, lr 0.01, cross-entropy over the last axis; one step = forward, loss,
backward, update. `export` writes the model with PyTorch's TorchScript
exporter (opset 17, train mode so BatchNorm is kept), the file users bring.
`time` prints one JSON line with the median step time after W warm-up steps.
Needs PyTorch 2.x and onnx (the runner makes a virtual environment).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("resnet18", "vit", "gpt", "mlp")
BATCH = {"resnet18": 32, "vit": 32, "gpt": 8, "mlp": 128}


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class Attention(nn.Module):
    def __init__(self, d, heads, causal_len=0):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        if causal_len:
            self.register_buffer("mask", torch.tril(torch.ones(causal_len, causal_len)).view(1, 1, causal_len, causal_len))
        else:
            self.mask = None

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.h) ** 0.5)
        if self.mask is not None:
            a = a.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(a, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, mlp, causal_len=0):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, causal_len)
        self.n2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp)
        self.fc2 = nn.Linear(mlp, d)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self, d=192, depth=6, heads=3, mlp=768, patch=4, image=32, classes=10):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        y = self.patch(x).flatten(2).transpose(1, 2)
        y = torch.cat([self.cls.expand(y.shape[0], -1, -1), y], dim=1) + self.pos
        y = self.norm(self.blocks(y))
        return self.head(y[:, 0])


class GPT(nn.Module):
    def __init__(self, vocab=1024, d=256, depth=4, heads=4, t=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, t, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, 4 * d, causal_len=t) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        return self.head(self.norm(self.blocks(self.tok(idx) + self.pos)))


def build(name):
    torch.manual_seed(0)
    b = BATCH[name]
    if name == "resnet18":
        return ResNet18(), torch.randn(b, 3, 32, 32)
    if name == "vit":
        return ViT(), torch.randn(b, 3, 32, 32)
    if name == "gpt":
        return GPT(), torch.randint(0, 1024, (b, 128))
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)), \
        torch.randn(b, 784)


def export(name, out):
    model, x = build(name)
    os.makedirs(out, exist_ok=True)
    model.train()
    torch.onnx.export(model, (x,), os.path.join(out, "model.onnx"), opset_version=17, dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    np.save(os.path.join(out, "x.npy"), x.numpy())


def time_steps(name, threads, iters, warmup):
    torch.set_num_threads(threads)
    model, x = build(name)
    model.train()
    with torch.no_grad():
        out = model(x)
    classes = out.shape[-1]
    y = torch.randint(0, classes, out.shape[:-1], generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1))
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"model": name, "batch": BATCH[name], "threads": threads, "torch": torch.__version__,
                      "samples_per_s": round(BATCH[name] / med, 1), "ms_per_step": round(med * 1e3, 4)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("export", "time"))
    ap.add_argument("model", choices=MODELS)
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    if a.cmd == "export":
        if not a.dir:
            ap.error("export needs DIR")
        export(a.model, a.dir)
    else:
        time_steps(a.model, a.threads, a.iters, a.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
