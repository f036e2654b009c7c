#!/usr/bin/env bash
# run_mpi.sh - 2 processes (one core each, MPI) as a 2-stage pipeline against
# 1 stage on 1 core, beside the same plan in one process (two threads), for
# each schedule, in one run. Prints a Markdown table for docs/PERF.md.
#
#   bench/run_mpi.sh [BUILD_DIR] [MODEL] [BATCH] [STEPS]
# Default: the GPT fixture on its training rows, batch 32, 60 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-gpt} batch=${3:-32} steps=${4:-60}
fx=tests/fixtures/$model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
common=(train "$fx/model.onnx" --data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy" --batch "$batch"
        --steps "$steps" --no-shuffle --lr 0.01)
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$model, global batch $batch, $steps SGD steps; 2 stages: one plan, in one process (threads) and in two (mpirun, --bind-to core)"
echo
echo "| configuration | 1 process: samples/s | vs 1 core | 2 processes (MPI): samples/s | vs 1 core | MPI / threads |"
echo "|---|---|---|---|---|---|"
r1=$(rate "$("$build/pdonnx" "${common[@]}" --threads 1)")
echo "| 1 stage, 1 core | $r1 | 1.00 | | | |"
for s in gpipe flush pipedream 2bw; do
  mb=4
  [ "$s" = pipedream ] && mb=1
  "$build/pdonnx" plan "$fx/model.onnx" --workers 2 --straight --algo uniform --batch $((batch / mb)) -o "$tmp/p.json" > /dev/null
  rt=$(rate "$("$build/pdonnx" "${common[@]}" --plan "$tmp/p.json" --schedule "$s" --microbatches "$mb")")
  rm=$(rate "$(mpirun --oversubscribe --bind-to core -np 2 "$build/pdonnx" "${common[@]}" --plan "$tmp/p.json" --schedule "$s" --microbatches "$mb")")
  awk -v s="$s" -v mb="$mb" -v rt="$rt" -v rm="$rm" -v r1="$r1" \
    'BEGIN { printf "| 2 stages, %s, %d microbatch%s | %s | %.2f | %s | %.2f | %.2f |\n", s, mb, mb == 1 ? "" : "es", rt, rt / r1, rm, rm / r1, rm / rt }'
done

# Data parallelism across 2 processes (one stage, replicated): the gradient
# all-reduce started bucket by bucket during the last backward of each
# minibatch (the default) against all of it at ALLREDUCE
# (PDONNX_ALLREDUCE_OVERLAP=0); rounds side by side, medians.
"$build/pdonnx" plan "$fx/model.onnx" --workers 1 --straight --batch $((batch / 4)) -o "$tmp/p1.json" > /dev/null
python3 - "$tmp/p1.json" "$tmp/dp.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["replicas"] = 2
p["stages"][0]["ranks"] = [0, 1]
p["workers"] = 2
json.dump(p, open(sys.argv[2], "w"))
PY
on=() off=()
for round in 1 2 3; do
  for ov in 0 1; do
    r=$(rate "$(PDONNX_ALLREDUCE_OVERLAP=$ov mpirun -x PDONNX_ALLREDUCE_OVERLAP --oversubscribe --bind-to core -np 2 \
        "$build/pdonnx" "${common[@]}" --plan "$tmp/dp.json" --schedule flush --microbatches 4)")
    if [ $ov = 1 ]; then on+=("$r"); else off+=("$r"); fi
  done
done
med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
echo
echo "| 2 processes, 1 stage x 2 replicas, flush, 4 microbatches | samples/s (median of 3) |"
echo "|---|---|"
echo "| all-reduce at ALLREDUCE | $(med "${off[@]}") |"
echo "| all-reduce overlapped with the last backward | $(med "${on[@]}") |"
awk -v a="$(med "${on[@]}")" -v b="$(med "${off[@]}")" 'BEGIN { printf "| overlapped / not | %.3f |\n", a / b }'
