#!/usr/bin/env bash
# run_load.sh - training speed with and without a competing process, pdonnx
# next to PyTorch 2.x, in one run (issue 23: with another process busy on one
# of the cores, a run with --threads = cores should slow in proportion, to
# about 2/3 on 2 cores, not by multiples). Prints a Markdown table.
#
#   bench/run_load.sh [BUILD_DIR] [MODEL] [ITERS]
#
# MODEL is one of bench/torch_realistic.py's (default mlp); threads = the
# cores here. The competitor is a shell busy loop started before and killed
# after each loaded run. Rows: pdonnx as it ships (one OpenMP pool, idle
# workers spinning ~30 us, then asleep); without the spin (passive: every
# parallel region wakes its workers); pdonnx as it was before (OpenBLAS's
# pthreads build beside spinning libgomp workers: LD_LIBRARY_PATH to that
# build and GOMP_SPINCOUNT at libgomp's default), where that build is
# installed; PyTorch. The venv is run_realistic.sh's ($PD_BENCH_VENV,
# default bench/.venv).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-mlp} iters=${3:-30}
venv=${PD_BENCH_VENV:-bench/.venv}
py=$venv/bin/python
[ -x "$py" ] || { echo "run_load.sh: no $py: run bench/run_realistic.sh once (it makes the venv)" >&2; exit 2; }
ninja -C "$build" bench/bench_train >/dev/null
out=$build/bench-realistic
[ -f "$out/$model/model.onnx" ] || "$py" bench/torch_realistic.py export "$model" "$out/$model" 2>/dev/null
t=$(nproc)
b=$("$py" -c "import sys; sys.path.insert(0, 'bench'); import torch_realistic as m; print(m.BATCH['$model'])")
ms() { "$py" -c "import json, sys; print(json.loads(sys.stdin.read())['ms_per_step'])"; }
ours() { env "$@" "$build/bench/bench_train" "$out/$model/model.onnx" "$out/$model/x.npy" --batch "$b" --threads "$t" \
           --iters "$iters" --warmup 3 --optimizer momentum | ms; }
torch() { "$py" bench/torch_realistic.py time "$model" --threads "$t" --iters "$iters" --warmup 3 2>/dev/null | ms; }
busy() { sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!; }
# row NAME CMD...: quiet, then loaded, steps/s and the ratio
row() {
  local name=$1
  shift
  local q l pid
  q=$("$@")
  pid=$(busy)
  l=$("$@") || true
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  awk -v n="$name" -v q="$q" -v l="$l" 'BEGIN { printf "| %s | %.2f | %.2f | %.2f |\n", n, 1e3 / q, 1e3 / l, q / l }'
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); model $model, batch $b, threads $t"
echo "one competing process: a shell busy loop; median of $iters steps after 3 warm-up steps"
echo
echo "| run | quiet steps/s | loaded steps/s | loaded / quiet |"
echo "|---|---|---|---|"
row "pdonnx (a short spin: GOMP_SPINCOUNT=1000, its default)" ours X=1
row "pdonnx, no spin (OMP_WAIT_POLICY=passive)" ours OMP_WAIT_POLICY=passive
old=/usr/lib/$(gcc -print-multiarch)/openblas-pthread
[ -f "$old/libopenblas.so.0" ] && row "pdonnx before (pthreads OpenBLAS, spinning libgomp)" ours LD_LIBRARY_PATH="$old" GOMP_SPINCOUNT=300000
row "PyTorch $("$py" -c 'import torch; print(torch.__version__)')" torch
