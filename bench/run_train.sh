#!/usr/bin/env bash
# run_train.sh - training throughput of pdonnx next to PyTorch CPU on the same
# models, batch and threads, in one run. Prints a Markdown table for docs/PERF.md.
#
#   bench/run_train.sh [BUILD_DIR] [BATCH] [ITERS]
# Needs Debian's python3-torch (tools/setup.sh --dev).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} batch=${2:-64} iters=${3:-30}
ninja -C "$build" bench/bench_train >/dev/null
py=/usr/bin/python3
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "batch $batch, SGD, median of $iters steps after 5 warm-up steps"
echo
echo "| model | threads | pdonnx steps/s | PyTorch steps/s | pdonnx / PyTorch |"
echo "|---|---|---|---|---|"
for m in mlp cnn_bn resnet gpt; do
  for t in 1 2; do
    ours=$(OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t "$build/bench/bench_train" tests/fixtures/$m/model.onnx \
           tests/fixtures/$m/x.npy --batch "$batch" --threads "$t" --iters "$iters" --name "$m")
    theirs=$($py bench/torch_train.py "$m" --batch "$batch" --threads "$t" --iters "$iters")
    $py - "$ours" "$theirs" "$m" "$t" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("| %s | %s | %.1f | %.1f | %.2f |" % (sys.argv[3], sys.argv[4], 1e3 / a["ms_per_step"], 1e3 / b["ms_per_step"],
                                          b["ms_per_step"] / a["ms_per_step"]))
PY
  done
done
