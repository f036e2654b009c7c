#!/usr/bin/env bash
# run_mpi.sh - 2 processes (one core each, MPI) as a 2-stage pipeline against
# 1 stage on 1 core, beside the same plan in one process (two threads), for
# each schedule, in one run; then 2-way data parallelism (one stage, two
# replicas) both ways, and the all-reduce overlap on and off. Prints Markdown
# tables for docs/PERF.md.
#
#   bench/run_mpi.sh [BUILD_DIR] [MODEL] [BATCH] [STEPS]
# Default: the GPT fixture on its training rows, global batch 64, 200 steps
# (run_pipeline.sh's figures). Each plan is the planner's (profiled once, the
# same file for both runs); each figure the median of $REPEATS runs (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-gpt} batch=${3:-64} steps=${4:-200}
fx=tests/fixtures/$model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
common=(train "$fx/model.onnx" --data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy" --batch "$batch"
        --steps "$steps" --no-shuffle --lr 0.01 --threads 1)
mpi=(mpirun --oversubscribe --bind-to core -np 2)
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
REPEATS=${REPEATS:-3}
# med CMD...: the median throughput of $REPEATS back-to-back runs of CMD
med() {
  local rs=() i
  for ((i = 0; i < REPEATS; i++)); do rs[i]=$(rate "$("$@")"); done
  printf '%s\n' "${rs[@]}" | sort -g | sed -n "$(((REPEATS + 1) / 2))p"
}
row() { # row LABEL THREADS MPI R1
  awk -v l="$1" -v rt="$2" -v rm="$3" -v r1="$4" \
    'BEGIN { printf "| %s | %s | %.2f | %s | %.2f | %.2f |\n", l, rt, rt / r1, rm, rm / r1, rm / rt }'
}
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$model, global batch $batch, $steps SGD steps; 2 stages: one plan, in one process (threads) and in two"
echo "(mpirun, --bind-to core); each figure the median of $REPEATS runs"
echo
echo "| configuration | 1 process: samples/s | vs 1 core | 2 processes (MPI): samples/s | vs 1 core | MPI / threads |"
echo "|---|---|---|---|---|---|"
r1=$(med "$build/pdonnx" "${common[@]}")
echo "| 1 stage, 1 core | $r1 | 1.00 | | | |"
# pipedream updates per microbatch (a minibatch is one); 2bw at its smallest
# valid count (microbatches = stages) and with 4
for sm in gpipe:4 flush:4 pipedream:1 2bw:2 2bw:4; do
  s=${sm%:*} mb=${sm#*:}
  "$build/pdonnx" plan "$fx/model.onnx" --workers 2 --straight --batch $((batch / mb)) -o "$tmp/p.json" > /dev/null
  run=("${common[@]}" --plan "$tmp/p.json" --schedule "$s" --microbatches "$mb")
  row "2 stages, $s, $mb microbatch$([ "$mb" = 1 ] || echo es)" "$(med "$build/pdonnx" "${run[@]}")" \
    "$(med "${mpi[@]}" "$build/pdonnx" "${run[@]}")" "$r1"
done

# Data parallelism (one stage, replicated): threads against processes, and
# across processes the gradient all-reduce started bucket by bucket during
# the last backward of each minibatch (the default) against all of it at
# ALLREDUCE (PDONNX_ALLREDUCE_OVERLAP=0).
"$build/pdonnx" plan "$fx/model.onnx" --workers 1 --straight --batch $((batch / 4)) -o "$tmp/p1.json" > /dev/null
python3 - "$tmp/p1.json" "$tmp/dp.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["replicas"] = 2
p["stages"][0]["ranks"] = [0, 1]
p["workers"] = 2
json.dump(p, open(sys.argv[2], "w"))
PY
dp=("${common[@]}" --plan "$tmp/dp.json" --schedule flush --microbatches 4)
on=$(med env PDONNX_ALLREDUCE_OVERLAP=1 "${mpi[@]}" -x PDONNX_ALLREDUCE_OVERLAP "$build/pdonnx" "${dp[@]}")
off=$(med env PDONNX_ALLREDUCE_OVERLAP=0 "${mpi[@]}" -x PDONNX_ALLREDUCE_OVERLAP "$build/pdonnx" "${dp[@]}")
row "1 stage x 2 replicas, flush, 4 microbatches" "$(med "$build/pdonnx" "${dp[@]}")" "$on" "$r1"
echo
echo "| 2 processes, 1 stage x 2 replicas, flush, 4 microbatches | samples/s |"
echo "|---|---|"
echo "| all-reduce at ALLREDUCE | $off |"
echo "| all-reduce overlapped with the last backward | $on |"
awk -v a="$on" -v b="$off" 'BEGIN { printf "| overlapped / not | %.3f |\n", a / b }'
