#!/usr/bin/env bash
# run_checkpoint.sh - what checkpoints cost: training throughput with none,
# every K steps and CheckFreq's auto, in one run, on one stage and as a
# 2-stage pipeline; and the time from a restart to the first resumed step (a
# process resuming from a checkpoint one step before the end: load, plan,
# restore, one step, save). Prints a Markdown table for docs/PERF.md.
#
#   bench/run_checkpoint.sh [BUILD_DIR] [MODEL] [BATCH] [STEPS] [CKPT_DIR]
# Default: the GPT fixture on its training rows, batch 32, 400 steps (each
# figure the median of three runs of one fixed plan); the
# checkpoints go to a temporary folder on the same disk as /tmp unless given.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-gpt} batch=${3:-32} steps=${4:-400}
dir=${5:-$(mktemp -d)}
trap 'rm -rf "$dir"/bench-*' EXIT
fx=tests/fixtures/$model
data=(--data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy")
common=(train "$fx/model.onnx" "${data[@]}" --batch "$batch" --steps "$steps" --no-shuffle --lr 0.01)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$model, batch $batch, $steps SGD steps; checkpoints in $dir"
echo
echo "| configuration | checkpoints | samples/s | overhead | written | snapshot pause |"
echo "|---|---|---|---|---|---|"
# one plan per pipeline shape, made once, so that every run compares the same stages
"$build/pdonnx" plan "$fx/model.onnx" --workers 2 --straight --batch $((batch / 4)) -o "$dir/bench-p4.json" > /dev/null
"$build/pdonnx" plan "$fx/model.onnx" --workers 2 --straight --batch "$batch" -o "$dir/bench-p1.json" > /dev/null
# the median of three runs' samples/s
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
for conf in "1 stage:--threads 1" "2 stages, flush:--plan $dir/bench-p4.json --schedule flush --microbatches 4" \
            "2 stages, pipedream:--plan $dir/bench-p1.json --schedule pipedream --microbatches 1"; do
  name=${conf%%:*}
  read -r -a flags <<<"${conf#*:}"
  # rounds of every variant side by side, so that the machine's drift hits them alike
  declare -A rates=() lines=()
  for round in 1 2 3; do
    for every in none 10 50 auto; do
      d=$dir/bench-$every
      rm -rf "$d"
      ck=()
      [ "$every" != none ] && ck=(--checkpoint-dir "$d" --checkpoint-every "$every" --checkpoint-keep 2)
      out=$("$build/pdonnx" "${common[@]}" "${flags[@]}" "${ck[@]}")
      rates[$every]+="$(rate "$out") "
      lines[$every]=$(grep '^checkpoints:' <<<"$out" || true)
    done
  done
  r0=$(median3 ${rates[none]})
  echo "| $name | none | $r0 | | | |"
  for every in 10 50 auto; do
    r=$(median3 ${rates[$every]})
    line=${lines[$every]}
    n=$(sed 's/checkpoints: \([0-9]*\) written.*/\1/' <<<"$line")
    pause=$(grep -o 'pauses [0-9.]* ms in all ([0-9.]*%' <<<"$line" | sed 's/pauses //; s/ in all (/, /')
    label="every $every"
    [ "$every" = auto ] && label="auto ($(grep -o 'every [0-9]* steps at the end' <<<"$line" | cut -d' ' -f2) steps)"
    awk -v n="$name" -v l="$label" -v r="$r" -v r0="$r0" -v w="$n" -v p="$pause" \
      'BEGIN { printf "| %s | %s | %s | %.1f%% | %s | %s of training) |\n", n, l, r, 100 * (1 - r / r0), w, p }'
    rm -rf "$d"
  done
done
# restart: a checkpoint at step steps-1, resumed; the process's wall time
d=$dir/bench-restart
"$build/pdonnx" "${common[@]}" --plan "$dir/bench-p4.json" --schedule flush --microbatches 4 --checkpoint-dir "$d" \
  --checkpoint-every $((steps - 1)) --checkpoint-keep 0 --quiet
rm -rf "$d/ckpt-$(printf '%012d' "$steps")"
t0=$(date +%s.%N)
"$build/pdonnx" "${common[@]}" --plan "$dir/bench-p4.json" --schedule flush --microbatches 4 --resume "$d" --quiet
t1=$(date +%s.%N)
echo
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "restart to the first resumed step (2 stages, flush; process start to exit, one step): %.3f s\n", b - a }'
