#!/usr/bin/env python3
"""gen_zoo.py - the model zoo (issue 18): common model families in small,
seeded, random-init configurations, each exported by both of PyTorch 2.x's
exporters, with PyTorch's forward output and a 10-step SGD trajectory.

Run by a developer, not by CI, in a virtual environment with PyTorch 2.x,
torchvision, transformers, onnx and onnxscript from PyPI:

    python3 -m venv /tmp/zoo && /tmp/zoo/bin/pip install torch torchvision transformers onnx onnxscript
    /tmp/zoo/bin/python tests/zoo/gen_zoo.py                 # every model
    /tmp/zoo/bin/python tests/zoo/gen_zoo.py gpt2 lstm_lm    # some

Writes tests/zoo/<model>-<exporter>/ for exporter `ts` (torch.onnx.export,
TorchScript, opset 17) and `dynamo` (dynamo=True, opset 20):

  model.onnx    one input `x`, one output `y`, batch dimension symbolic (and
                the sequence length of SEQ_DYNAMIC's dynamo exports).
                The dynamo export of a model in training mode is not optimized:
                onnxscript's optimizer folds BatchNorm into the convolutions
                with the running statistics even then (forward 0.74 off)
  x.npy         BATCH rows of input; y.npy: PyTorch's output on them
  X.npy, Y.npy  ROWS rows of training input and int64 labels
  losses.npy    float64 (STEPS,): PyTorch's loss at each SGD step
  folded/gpt2-dynamo-static-t.onnx  GPT-2's dynamo export with a static
                sequence length, whose position embedding the exporter folded
  meta.txt      key=value: lr, batch, steps, rows, params (trained tensors),
                floats (their elements), torch (version), exporter, mode

Semantics the C test (tests/test_zoo.c) reproduces: step k trains on rows
(k*BATCH + j) % ROWS; loss = cross-entropy of y over its last axis against Y,
mean over all other positions; plain SGD (lr) over every parameter.
Forward and training both run in the mode the model was exported in (the
BatchNorm models are exported in training mode, so BatchNorm is kept and
normalises with the batch's statistics: the eval-mode TorchScript export
folds it into the convolutions, and a folded model trains another
parametrisation than PyTorch's). No dropout anywhere.

Every parameter is perturbed by seeded noise after init, so that no two are
equal and none is all zeros or all ones: the exporters neither tie nor drop
any (a test input that cannot hide a bug).
"""

import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, ROWS, STEPS = 4, 10, 10
warnings.filterwarnings("ignore")


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if b.dtype.is_floating_point and "running_var" in name:
                b.copy_(1.0 + 0.2 * torch.rand(b.shape, generator=g))
            elif b.dtype.is_floating_point and "running_mean" in name:
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


class Logits(nn.Module):
    """A Hugging Face model as x -> logits (one tensor in, one out)."""

    def __init__(self, m, kind="lm"):
        super().__init__()
        self.m, self.kind = m, kind

    def forward(self, x):
        if self.kind == "t5":
            return self.m(input_ids=x, decoder_input_ids=x).logits
        return self.m(input_ids=x).logits


# ---- the models: name -> (build(), input(rows, gen), labels(y, gen), train_mode) -------------------------

def tokens(vocab, t):
    return lambda rows, g: torch.randint(0, vocab, (rows, t), generator=g)


def images(c, h, w):
    return lambda rows, g: torch.randn((rows, c, h, w), generator=g)


def resnet18():
    from torchvision.models.resnet import BasicBlock, ResNet

    class SmallResNet(ResNet):  # ResNet-18's shape ([2,2,2,2] BasicBlocks) at widths 4..32
        def __init__(self):
            super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=10)
            self.inplanes = 4
            self.conv1 = nn.Conv2d(3, 4, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.layer1 = self._make_layer(BasicBlock, 4, 2)
            self.layer2 = self._make_layer(BasicBlock, 8, 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 16, 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 32, 2, stride=2)
            self.fc = nn.Linear(32, 10)

    return SmallResNet(), images(3, 32, 32), True


def mobilenet_v2():
    from torchvision.models import MobileNetV2
    setting = [[1, 8, 1, 1], [6, 12, 2, 2], [6, 16, 2, 2]]
    m = MobileNetV2(num_classes=10, width_mult=0.5, inverted_residual_setting=setting)
    m.classifier[0].p = 0.0
    return m, images(3, 16, 16), True


def mobilenet_v3_small():
    from torchvision.models.mobilenetv3 import InvertedResidualConfig as C, MobileNetV3
    setting = [C(8, 3, 8, 8, True, "RE", 2, 1, 1.0), C(8, 3, 24, 12, False, "RE", 2, 1, 1.0),
               C(12, 5, 32, 16, True, "HS", 2, 1, 1.0), C(16, 5, 48, 16, True, "HS", 1, 1, 1.0)]
    m = MobileNetV3(setting, last_channel=32, num_classes=10, dropout=0.0)
    return m, images(3, 32, 32), True


def efficientnet_b0():
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig as C
    setting = [C(1, 3, 1, 8, 8, 1), C(6, 3, 2, 8, 12, 2), C(6, 5, 2, 12, 16, 1)]
    m = EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10, last_channel=32)
    return m, images(3, 16, 16), True


def convnext():
    from torchvision.models.convnext import CNBlockConfig as C, ConvNeXt
    setting = [C(8, 16, 1), C(16, 32, 1), C(32, None, 1)]
    m = ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=10)
    return m, images(3, 32, 32), False


def densenet():
    from torchvision.models import DenseNet
    m = DenseNet(growth_rate=4, block_config=(2, 2), num_init_features=8, bn_size=2, drop_rate=0.0, num_classes=10)
    return m, images(3, 16, 16), True


def vit():
    from torchvision.models import VisionTransformer
    m = VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                          dropout=0.0, attention_dropout=0.0, num_classes=10)
    return m, images(3, 16, 16), False


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    c = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                   attn_pdrop=0.0)
    return Logits(GPT2LMHeadModel(c)), tokens(64, 8), False


def bert():
    from transformers import BertConfig, BertForMaskedLM
    c = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                   max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return Logits(BertForMaskedLM(c)), tokens(64, 8), False


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    c = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=16, attn_implementation="eager")
    return Logits(LlamaForCausalLM(c)), tokens(64, 8), False


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    c = T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
                 relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                 attn_implementation="eager")
    return Logits(T5ForConditionalGeneration(c), "t5"), tokens(64, 8), False


class LstmLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.rnn = nn.LSTM(16, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 64)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.head(h)


class GruSeq2Seq(nn.Module):
    """GNMT-shaped: a bidirectional GRU encoder, a GRU decoder started from
    the encoder's last state, reading the target tokens (here the source's)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.enc = nn.GRU(16, 8, batch_first=True, bidirectional=True)
        self.dec = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, 64)

    def forward(self, x):
        e = self.emb(x)
        _, h = self.enc(e)
        h0 = torch.cat([h[0], h[1]], dim=-1).unsqueeze(0)
        d, _ = self.dec(e, h0)
        return self.head(d)


class UNet(nn.Module):
    """GroupNorm UNet: two levels down (strided conv), ConvTranspose and
    Resize (nearest) back up, skip connections by concatenation."""

    def __init__(self):
        super().__init__()
        blk = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(2, o), nn.SiLU())
        self.d1, self.d2 = blk(3, 8), blk(8, 16)
        self.down1 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.down2 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.mid = blk(16, 16)
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.u2 = blk(32, 8)
        self.u1 = blk(16, 8)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(self.down1(a))
        m = self.mid(self.down2(b))
        u = self.u2(torch.cat([self.up2(m), b], dim=1))
        u = F.interpolate(u, scale_factor=2.0, mode="nearest")
        u = self.u1(torch.cat([u, a], dim=1))
        return self.out(u).permute(0, 2, 3, 1)  # per-pixel logits over 4 classes, last axis


MODELS = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "convnext": convnext,
    "densenet": densenet,
    "vit": vit,
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "t5": t5,
    "lstm_lm": lambda: (LstmLM(), tokens(64, 8), False),
    "gru_seq2seq": lambda: (GruSeq2Seq(), tokens(64, 8), False),
    "unet": lambda: (UNet(), images(3, 16, 16), False),
}


# learning rates other than 0.05: where float32 and float64 PyTorch part ways
# within 10 steps at 0.05 (a ReLU or a tiny BatchNorm variance tips), the
# reference would not be one; the generator measures that gap (meta's spread)
LR = {"resnet18": 0.01, "mobilenet_v2": 0.01, "mobilenet_v3_small": 0.01, "efficientnet_b0": 0.01, "densenet": 0.01}


def trajectory(model, X, Y, lr, dtype):
    """STEPS SGD steps on a copy of model in dtype: the losses."""
    import copy
    m = copy.deepcopy(model).to(dtype)
    X = X.to(dtype) if X.dtype.is_floating_point else X
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=lr)
    losses = []
    for k in range(STEPS):
        rows = [(k * BATCH + j) % ROWS for j in range(BATCH)]
        yb = m(X[rows])
        loss = F.cross_entropy(yb.reshape(-1, yb.shape[-1]), Y[rows].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# Language models whose position embedding (or relative position bias) the
# dynamo exporter folds into constant rows when the sequence length is static
# (wpe[arange(T)]): the parameter is gone from the file. Exported, as users
# export text models, with a dynamic sequence length, they keep it.
SEQ_DYNAMIC = {"gpt2", "bert", "t5"}


def export(model, x, path, exporter, seq_dynamic=False):
    dyn = {"x": {0: "N"}, "y": {0: "N"}}
    if exporter == "ts":
        kw = {}
        if model.training:
            kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], dynamic_axes=dyn,
                          opset_version=17, dynamo=False, **kw)
    else:
        dims = {0: torch.export.Dim("N", min=2, max=64)}
        if seq_dynamic:
            dims[1] = torch.export.Dim("T", min=2, max=16)
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], dynamic_shapes={"x": dims},
                          opset_version=20, dynamo=True, external_data=False, optimize=not model.training)


# Half-precision exports (model.half() / .to(torch.bfloat16), then export):
# pdonnx trains them in float32 (pd_load_options.half_as_float), so the
# reference is PyTorch's float32 run from the rounded weights and inputs.
# Not the bfloat16 dynamo exports: they store the model's constants (the
# attention scale 0.5946 as 0.59375, GELU's 0.7979 as 0.796875) in bfloat16,
# so the file means another model than the float32 reference, by 1e-3; nor
# GPT-2's bfloat16 TorchScript export, which PyTorch 2.15 fails ("ScalarType
# ComplexDouble is an unexpected tensor scalar type").
HALF = {"gpt2_fp16": ("gpt2", torch.float16, ["ts", "dynamo"]), "vit_bf16": ("vit", torch.bfloat16, ["ts"])}


def make(name, exporter):
    torch.manual_seed(0)
    base, half, _ = HALF.get(name, (name, None, None))
    model, make_x, train_mode = MODELS[base]()
    perturb(model, 1)
    if half is not None:
        model.to(half).float()  # the weights the file holds, in float32
    model.train(train_mode)
    g = torch.Generator().manual_seed(2)
    X = make_x(ROWS, g)
    if half is not None and X.dtype.is_floating_point:
        X = X.to(half).float()
    x = X[:BATCH].clone()
    out = os.path.join(HERE, "%s-%s" % (name, exporter))
    os.makedirs(out, exist_ok=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if half is not None:
        import copy
        hx = x.to(half) if x.dtype.is_floating_point else x
        export(copy.deepcopy(model).to(half), hx, os.path.join(out, "model.onnx"), exporter, base in SEQ_DYNAMIC)
    else:
        export(model, x, os.path.join(out, "model.onnx"), exporter, name in SEQ_DYNAMIC)
    if name == "gpt2" and exporter == "dynamo":
        # the same with a static sequence length, for the note pdonnx gives
        # when a parameter was folded away (tests/test_cli.sh)
        folded = os.path.join(HERE, "folded")
        os.makedirs(folded, exist_ok=True)
        export(model, x, os.path.join(folded, "gpt2-dynamo-static-t.onnx"), exporter)
    model.load_state_dict(state)  # a training-mode export runs forwards that move BatchNorm's statistics
    # y is what the file means in ONNX's semantics (what onnxruntime computes):
    # the dynamo exporter writes a training-mode BatchNorm without
    # training_mode=1, which normalises with the running statistics
    forward_mode = train_mode and exporter == "ts"
    model.train(forward_mode)
    with torch.no_grad():
        y = model(x)
    model.train(train_mode)
    model.load_state_dict(state)
    Y = torch.randint(0, y.shape[-1], (ROWS,) + tuple(y.shape[1:-1]), generator=g)
    params = [p for p in model.parameters() if p.requires_grad]
    lr = LR.get(base, 0.05)
    losses = trajectory(model, X, Y, lr, torch.float32)
    l64 = trajectory(model, X, Y, lr, torch.float64)
    spread = max(abs(a - b) / abs(b) for a, b in zip(losses, l64))
    np.save(os.path.join(out, "x.npy"), x.numpy())
    np.save(os.path.join(out, "y.npy"), y.detach().numpy().astype(np.float32))
    np.save(os.path.join(out, "X.npy"), X.numpy())
    np.save(os.path.join(out, "Y.npy"), Y.numpy().astype(np.int64))
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float64))
    with open(os.path.join(out, "meta.txt"), "w") as f:
        f.write("lr=%g batch=%d steps=%d rows=%d params=%d floats=%d mode=%s forward=%s exporter=%s torch=%s spread=%.1e\n" % (
            lr, BATCH, STEPS, ROWS, len(params), sum(p.numel() for p in params), "train" if train_mode else "eval",
            "train" if forward_mode else "eval", exporter, torch.__version__.split("+")[0], spread))
    kb = os.path.getsize(os.path.join(out, "model.onnx")) // 1024
    print("%-28s %5d KB  %d params (%d floats)  losses %.4f .. %.4f  float32/64 spread %.1e%s" % (
        os.path.basename(out), kb, len(params), sum(p.numel() for p in params), losses[0], losses[-1], spread,
        "  WARNING: not a reference at 1e-4" if spread > 1e-5 else ""))


def main():
    torch.set_num_threads(1)
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(MODELS) + list(HALF)
    exporters = ["ts", "dynamo"]
    for a in sys.argv[1:]:
        if a.startswith("--exporter="):
            exporters = a.split("=", 1)[1].split(",")
    for n in names:
        for e in exporters:
            if n in HALF and e not in HALF[n][2]:
                continue
            try:
                make(n, e)
            except Exception as ex:  # keep going: report which export failed
                print("%s-%s: FAILED %s: %s" % (n, e, type(ex).__name__, str(ex).splitlines()[0][:200]))


if __name__ == "__main__":
    main()
