#!/usr/bin/env bash
# compare_builds.sh - one training step of a realistic model (run_realistic.sh's
# exports) on two builds of pdonnx, alternately, so that this shared VM's drift
# (+-20% from minute to minute) falls on both: what a change gains.
#
#   bench/compare_builds.sh OLD_BUILD NEW_BUILD MODEL THREADS [PAIRS] [ITERS]
#
# OLD_BUILD, NEW_BUILD: build directories (bench/bench_train in each; e.g. a
# `git worktree` of the old commit, set up with meson); MODEL: one of
# run_realistic.sh's (build/bench-realistic/MODEL, exported there first);
# PAIRS (default 10) runs of each, each the median of ITERS steps (default 10)
# after 3 warm-up steps. Prints each side's median ms per step, the speed-up
# and each pair's ratio (old / new: above 1, the new build is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { sed -n '4,12p' "$0"; exit 2; }
old=$1 new=$2 m=$3 t=$4 pairs=${5:-10} iters=${6:-10}
dir=build/bench-realistic/$m
[ -f "$dir/model.onnx" ] || { echo "compare_builds.sh: $dir/model.onnx: run bench/run_realistic.sh first" >&2; exit 2; }
batch=$(python3 -c "import ast,sys; src=open('bench/torch_realistic.py').read(); \
i=src.index('BATCH = '); print(ast.literal_eval(src[i+8:src.index('}', i)+1])['$m'])")
step() { "$1/bench/bench_train" "$dir/model.onnx" "$dir/x.npy" --batch "$batch" --threads "$t" --iters "$iters" \
           --warmup 3 --name "$m" --optimizer momentum | python3 -c "import json,sys; print(json.load(sys.stdin)['ms_per_step'])"; }
a=() b=()
for ((r = 0; r < pairs; r++)); do
  a+=("$(step "$old")")
  b+=("$(step "$new")")
done
python3 - "$m" "$t" "${a[*]}" "${b[*]}" <<'EOF'
import statistics, sys
m, t = sys.argv[1], sys.argv[2]
a, b = ([float(v) for v in x.split()] for x in sys.argv[3:5])
print(f"{m}, {t} threads: old {statistics.median(a):.2f} ms, new {statistics.median(b):.2f} ms a step: "
      f"{statistics.median(a) / statistics.median(b):.3f}x; pairs (old / new) "
      + " ".join(f"{x / y:.2f}" for x, y in zip(a, b)))
EOF
