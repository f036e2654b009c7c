#!/usr/bin/env bash
# run_zoo.sh - the model zoo's training step (tests/zoo/, issue 18) on one
# thread, pdonnx next to PyTorch 2.x on the same model, batch and optimizer
# (plain SGD), both exporters' files, in one run. Prints a Markdown table.
#
#   bench/run_zoo.sh [BUILD_DIR (build)] [BATCH (32)] [ITERS (20)] [REPEATS (3)]
#
# PyTorch (timed once per model: both exports are of the same module) runs in $PD_BENCH_VENV (default bench/.venv) with torchvision and
# transformers (the zoo's families come from them). Each row runs pdonnx and
# PyTorch alternately REPEATS times, each the median of ITERS steps after 3
# warm-up steps, and reports the median run of each side.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} batch=${2:-32} iters=${3:-20} repeats=${4:-3}
venv=${PD_BENCH_VENV:-bench/.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch torchvision transformers onnx numpy
fi
py=$venv/bin/python
ninja -C "$build" bench/bench_train >/dev/null
median_ms() { "$py" -c "import json,statistics,sys; print(statistics.median(json.loads(l)['ms_per_step'] for l in sys.stdin))"; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $("$py" -c 'import torch; print("PyTorch", torch.__version__)')"
echo "plain SGD, batch $batch, 1 thread, median of $iters steps after 3 warm-up steps, median of $repeats alternating runs"
echo
echo "| model | PyTorch ms/step | pdonnx ms/step, TorchScript export | pdonnx ms/step, dynamo export | pdonnx / PyTorch (speed, ts / dynamo) |"
echo "|---|---|---|---|---|"
for m in $(ls tests/zoo | sed -n 's/-ts$//p'); do
  t=() o=() d=()
  for r in $(seq "$repeats"); do
    t+=("$("$py" bench/zoo_bench.py "$m" --batch "$batch" --threads 1 --iters "$iters" 2>/dev/null | tail -1)") || true
    for e in ts dynamo; do
      j=$("$build/bench/bench_train" "tests/zoo/$m-$e/model.onnx" "tests/zoo/$m-$e/X.npy" --batch "$batch" --threads 1 \
            --iters "$iters" --warmup 3 --optimizer sgd 2>/dev/null | tail -1) || true
      if [ "$e" = ts ]; then o+=("$j"); else d+=("$j"); fi
    done
  done
  pt=$(printf '%s\n' "${t[@]}" | grep '^{' | median_ms 2>/dev/null || echo nan)
  po=$(printf '%s\n' "${o[@]}" | grep '^{' | median_ms 2>/dev/null || echo nan)
  pd=$(printf '%s\n' "${d[@]}" | grep '^{' | median_ms 2>/dev/null || echo nan)
  "$py" -c "t,o,d=float('$pt'),float('$po'),float('$pd'); print('| $m | %.2f | %.2f | %.2f | %.2f / %.2f |' % (t, o, d, t / o, t / d))"
done
