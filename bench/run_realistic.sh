#!/usr/bin/env bash
# run_realistic.sh - training at realistic sizes, pdonnx next to PyTorch 2.x on
# the same exported models, batch and threads, in one run (issue 23). Prints
# the Markdown table of docs/PERF.md ("Realistic sizes").
#
#   bench/run_realistic.sh [BUILD_DIR] [ITERS] [REPEATS]
#
# The models (bench/torch_realistic.py: ResNet-18, a ViT, a GPT, an MLP) are
# built and exported by PyTorch 2.x, which runs in a virtual environment:
# $PD_BENCH_VENV (default bench/.venv, made here with pip on first use). Each
# row runs pdonnx and PyTorch alternately REPEATS times (default 3), each run
# the median of ITERS steps (default 20) after 3 warm-up steps, and reports
# the median run of each side: this shared VM's noise is +-20% between runs.
# MODELS (default "mlp gpt vit resnet18") picks the rows, THREADS (default
# "1 2") the thread counts; each count past the first gets a column of its
# speed over the first's, for pdonnx and PyTorch. PD_BENCH_CPUS (a list of
# CPU numbers, say one per physical core) pins a run of T threads, both
# sides, to its first T CPUs with taskset. PD_BENCH_PYTHON names a Python
# that already has PyTorch 2.x and onnx instead of the virtual environment.
# BUILD_DIR may be a folder packed by bench/cpu_pack.sh (its lib/ goes on
# LD_LIBRARY_PATH), for a machine without this project's build dependencies.
# A last table puts pdonnx beside ONNX Runtime training where it can train
# the model ($PD_BENCH_ORT_VENV, default bench/.venv-ort; see the end).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} iters=${2:-20} repeats=${3:-3}
venv=${PD_BENCH_VENV:-bench/.venv}
if [ -n "${PD_BENCH_PYTHON:-}" ]; then
  py=$PD_BENCH_PYTHON
else
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch onnx numpy
  fi
  py=$venv/bin/python
fi
if [ -f "$build/build.ninja" ]; then
  ninja -C "$build" bench/bench_train >/dev/null
else
  export LD_LIBRARY_PATH="$(cd "$build" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
threads=(${THREADS:-1 2})
cpus=(${PD_BENCH_CPUS:-})
# pin T: the taskset prefix for a run of T threads (nothing without PD_BENCH_CPUS)
pin() {
  [ ${#cpus[@]} -gt 0 ] || return 0
  local list=("${cpus[@]:0:$1}")
  local IFS=,
  echo taskset -c "${list[*]}"
}
out=$build/bench-realistic
for m in ${MODELS:-mlp gpt vit resnet18}; do
  [ -f "$out/$m/model.onnx" ] || "$py" bench/torch_realistic.py export "$m" "$out/$m" 2>/dev/null
done
batch() { "$py" -c "import sys; sys.path.insert(0, 'bench'); import torch_realistic as t; print(t.BATCH['$1'])"; }
# median of the REPEATS runs' ms_per_step (one JSON line each on stdin)
median_ms() { "$py" -c "import json,statistics,sys; print(statistics.median(json.loads(l)['ms_per_step'] for l in sys.stdin))"; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $("$py" -c 'import torch; print("PyTorch", torch.__version__)')"
echo "SGD momentum 0.9, median of $iters steps after 3 warm-up steps, median of $repeats alternating runs"
[ ${#cpus[@]} -gt 0 ] && echo "a run of T threads pinned to the first T of CPUs ${cpus[*]}"
t1=${threads[0]}
echo
echo "| model | batch | threads | pdonnx steps/s | PyTorch steps/s | pdonnx / PyTorch | pdonnx over ${t1}T | PyTorch over ${t1}T |"
echo "|---|---|---|---|---|---|---|---|"
for m in ${MODELS:-mlp gpt vit resnet18}; do
  b=$(batch "$m")
  declare -A ours theirs
  for t in "${threads[@]}"; do
    o=() p=()
    for ((r = 0; r < repeats; r++)); do
      o+=("$($(pin "$t") "$build/bench/bench_train" "$out/$m/model.onnx" "$out/$m/x.npy" --batch "$b" --threads "$t" \
              --iters "$iters" --warmup 3 --name "$m" --optimizer momentum)")
      p+=("$($(pin "$t") "$py" bench/torch_realistic.py time "$m" --threads "$t" --iters "$iters" --warmup 3 2>/dev/null)")
    done
    ours[$t]=$(printf '%s\n' "${o[@]}" | median_ms)
    theirs[$t]=$(printf '%s\n' "${p[@]}" | median_ms)
  done
  for t in "${threads[@]}"; do
    scale=("" "")
    [ "$t" != "$t1" ] && scale=("$(awk -v a="${ours[$t1]}" -v b="${ours[$t]}" 'BEGIN { printf "%.2f", a / b }')"
                                "$(awk -v a="${theirs[$t1]}" -v b="${theirs[$t]}" 'BEGIN { printf "%.2f", a / b }')")
    awk -v m="$m" -v b="$b" -v t="$t" -v o="${ours[$t]}" -v p="${theirs[$t]}" -v s1="${scale[0]}" -v s2="${scale[1]}" \
      'BEGIN { printf "| %s | %s | %s | %.2f | %.2f | %.2f | %s | %s |\n", m, b, t, 1e3 / o, 1e3 / p, p / o, s1, s2 }'
  done
  unset ours theirs
done

# Against ONNX Runtime training (onnxruntime-training 1.19 from PyPI, which
# imports torch: $PD_BENCH_ORT_VENV, skipped when it is not there). Its SGD
# has no momentum, so pdonnx runs plain SGD here. Of these models it trains
# the MLP: its gradient builder fails on the ViT export and on the train-mode
# BatchNorm ResNet (running_var_grad), and its cross-entropy takes the classes
# on axis 1, not the GPT's last.
ortpy=${PD_BENCH_ORT_VENV:-bench/.venv-ort}/bin/python
[ -x "$ortpy" ] || exit 0
echo
echo "ONNX Runtime $("$ortpy" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null) training, SGD without momentum:"
echo
echo "| model | batch | threads | pdonnx steps/s | ORT steps/s | pdonnx / ORT |"
echo "|---|---|---|---|---|---|"
for m in mlp; do
  b=$(batch "$m")
  for t in "${threads[@]}"; do
    o=() p=()
    for ((r = 0; r < repeats; r++)); do
      o+=("$($(pin "$t") "$build/bench/bench_train" "$out/$m/model.onnx" "$out/$m/x.npy" --batch "$b" --threads "$t" \
              --iters "$iters" --warmup 3 --name "$m" --optimizer sgd)")
      p+=("$($(pin "$t") "$ortpy" bench/ort_realistic.py "$out/$m" --threads "$t" --iters "$iters" --warmup 3 2>/dev/null | tail -1)")
    done
    o1=$(printf '%s\n' "${o[@]}" | median_ms)
    p1=$(printf '%s\n' "${p[@]}" | median_ms)
    awk -v m="$m" -v b="$b" -v t="$t" -v o="$o1" -v p="$p1" \
      'BEGIN { printf "| %s | %s | %s | %.2f | %.2f | %.2f |\n", m, b, t, 1e3 / o, 1e3 / p, p / o }'
  done
done
