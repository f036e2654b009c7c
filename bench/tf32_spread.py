#!/usr/bin/env python3
"""tf32_spread.py - how far PyTorch's own reduced-precision GPU training lands
from the fp32 reference trajectories of tests/fixtures/<model>/train: the
yardstick for test_train's --device cuda --precision tf32|bf16 tolerances.

For each model and case of gen_train_fixtures.CASES it trains the fixture's
model STEPS steps on the CPU in fp32 (the reference, as the fixtures were
made) and on the GPU with torch.set_float32_matmul_precision('high') (TF32
products, cuDNN TF32: what pdonnx's tf32 does) and 'medium' (bf16 products
over fp32 storage, cuDNN TF32: what pdonnx's bf16 does), and prints each
run's deviation from the reference as tests/test_train.c measures it (losses:
max relative; weights: max over tensors of max_i |a_i - b_i| / (|b_i| +
mean|b|)).

    python3 bench/tf32_spread.py [MODEL ...]     # on a GPU machine, torch 2.x
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import gen_fixtures  # noqa: E402
import gen_train_fixtures as gt  # noqa: E402


def train(name, p, X, Y, dev):
    model = gen_fixtures.build(name)[0].to(dev).train()
    for mod in model.modules():  # gen_fixtures' GPT keeps its causal mask as a plain attribute
        if torch.is_tensor(getattr(mod, "mask", None)):
            mod.mask = mod.mask.to(dev)
    params = gt.trained_params(model, p)
    opt = gt.make_optimizer(params, p)
    X, Y = torch.from_numpy(X).to(dev), torch.from_numpy(Y).to(dev)
    losses = []
    for k in range(gt.STEPS):
        idx = torch.tensor(gt.batch_rows(k), device=dev)
        opt.zero_grad(set_to_none=False)
        out = model(X[idx])
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), Y[idx].reshape(-1))
        loss.backward()
        if p["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, p["clip"])
        opt.step()
        losses.append(loss.item())
    return model.cpu().eval(), torch.tensor(losses, dtype=torch.float64).numpy()


def main(argv):
    torch.set_num_threads(1)
    names = argv or ["mlp", "cnn_bn", "resnet", "gpt"]
    print("%-7s %-9s %-7s %10s %10s  %s" % ("model", "case", "mode", "losses", "weights", "worst tensor"))
    for name in names:
        for case, p in gt.CASES[name]:
            p = gt.case_params(p)
            X, Y = gt.make_data(name, p["seed"])
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False
            m0, l0 = train(name, p, X, Y, "cpu")
            for mode, prec in (("fp32", "highest"), ("tf32", "high"), ("bf16", "medium")):
                torch.set_float32_matmul_precision(prec)
                torch.backends.cudnn.allow_tf32 = mode != "fp32"
                m, l = train(name, p, X, Y, "cuda")
                dl, (dw, wk), _ = gt._devs(m, l, m0, l0)
                print("%-7s %-9s %-7s %10.3g %10.3g  %s" % (name, case, mode, dl, dw, wk), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
