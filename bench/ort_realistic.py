"""ONNX Runtime training on bench/torch_realistic.py's exported models: the
third column of bench/run_realistic.sh (issue 23).

    python bench/ort_realistic.py DIR --threads T [--iters I] [--warmup W]

DIR holds model.onnx and x.npy (torch_realistic.py export). Artifacts are
generated into DIR/ort (onnxruntime.training.artifacts: every float
initializer trained, cross-entropy, SGD, ORT's plain SGD having no momentum);
one step = forward, loss, backward, optimizer step, gradients reset. One JSON
line with the median step time after W warm-up steps. Needs onnxruntime-training
(1.19, PyPI), which imports torch.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module, Optimizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    art = os.path.join(a.dir, "ort")
    if not os.path.exists(os.path.join(art, "training_model.onnx")):
        m = onnx.load(os.path.join(a.dir, "model.onnx"))
        params = [t.name for t in m.graph.initializer
                  if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) > 0]
        os.makedirs(art, exist_ok=True)
        artifacts.generate_artifacts(m, requires_grad=params, loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.SGD, artifact_directory=art)
    x = np.load(os.path.join(a.dir, "x.npy"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state, os.path.join(art, "eval_model.onnx"),
                    session_options=so)
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    opt.set_learning_rate(0.01)
    out = onnx.load(os.path.join(a.dir, "model.onnx"), load_external_data=False).graph.output[0]
    dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
    dims[0] = x.shape[0]  # the batch axis is symbolic in the export
    classes = dims[-1]
    rows = int(np.prod(dims[:-1]))
    y = (np.arange(rows, dtype=np.int64) * 7919) % classes
    module.train()
    times = []
    for i in range(a.warmup + a.iters):
        t0 = time.perf_counter()
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"dir": a.dir, "threads": a.threads, "onnxruntime": ort.__version__,
                      "samples_per_s": round(x.shape[0] / med, 1), "ms_per_step": round(med * 1e3, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
