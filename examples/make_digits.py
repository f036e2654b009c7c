#!/usr/bin/python3
"""Generate the bundled default example: an untrained MLP and the digits data set.

    /usr/bin/python3 examples/make_digits.py              # writes the files below
    /usr/bin/python3 examples/make_digits.py --baseline   # also trains it in PyTorch

Writes (deterministically):
  examples/digits_mlp.onnx      64 -> 128 -> 64 -> 10 MLP with ReLU, PyTorch's default
                                initialisation after torch.manual_seed(0), opset 17,
                                input "x" (N,64) float32, output "y" (N,10) logits,
                                batch dimension symbolic ("N"). Same architecture and
                                weights as tests/fixtures/mlp/model.onnx.
  examples/digits/train_x.npy   (1437,64) float32, pixels scaled from 0..16 to [0,1]
  examples/digits/train_y.npy   (1437,)   int64 class 0..9
  examples/digits/val_x.npy     (360,64)  float32
  examples/digits/val_y.npy     (360,)    int64

The data is the UCI 8x8 handwritten digits set bundled with scikit-learn
(sklearn.datasets.load_digits, 1797 images), split 80/20 with
train_test_split(test_size=0.2, random_state=0, stratify=y).

--baseline trains the same model with plain SGD and softmax cross-entropy in
PyTorch and prints the validation accuracy per epoch: a reference for what the C
trainer should reach with the same settings. It writes nothing.
"""

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
import gen_fixtures  # noqa: E402  (the MLP class and the export settings)


def load_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return [np.ascontiguousarray(a) for a in (xtr, ytr, xva, yva)]


def fresh_model():
    torch.manual_seed(0)
    return gen_fixtures.MLP().eval()


def baseline(xtr, ytr, xva, yva, epochs, lr, batch):
    model = fresh_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xtr, ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xva, yva = torch.from_numpy(xva), torch.from_numpy(yva)
    for ep in range(epochs):
        # fixed order (no shuffling) so a C trainer can reproduce it exactly
        total = 0.0
        for i in range(0, len(xtr), batch):
            loss = torch.nn.functional.cross_entropy(model(xtr[i : i + batch]), ytr[i : i + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xtr[i : i + batch])
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        print("epoch %2d  train loss %.4f  val acc %.4f" % (ep + 1, total / len(xtr), acc))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", action="store_true", help="train in PyTorch and print val accuracy")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    xtr, ytr, xva, yva = load_split()
    ddir = os.path.join(HERE, "digits")
    os.makedirs(ddir, exist_ok=True)
    for name, a in (("train_x", xtr), ("train_y", ytr), ("val_x", xva), ("val_y", yva)):
        np.save(os.path.join(ddir, name + ".npy"), a)
        print("examples/digits/%s.npy %s %s" % (name, a.shape, a.dtype))

    path = os.path.join(HERE, "digits_mlp.onnx")
    gen_fixtures.export(fresh_model(), torch.from_numpy(xtr[:4]), path, keep_bn=False)
    import onnx

    onnx.checker.check_model(onnx.load(path), full_check=True)
    print("examples/digits_mlp.onnx %d bytes" % os.path.getsize(path))

    if args.baseline:
        baseline(xtr, ytr, xva, yva, args.epochs, args.lr, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
