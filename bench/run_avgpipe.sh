#!/usr/bin/env bash
# run_avgpipe.sh - AvgPipe on this machine: the same model, per-pipeline
# batch and step count trained by one stage on one core, by one pipeline of
# two stages under flush, 2bw and avgpipe, and by K = 2 parallel pipelines of
# one stage each (elastic averaging) on the same two cores; then the tuner's
# choice for two workers (pdonnx plan --algo avgpipe) and its prediction.
# Prints a Markdown table for docs/PERF.md: samples/s, the ratio over one
# core, the final loss (K = 2: the mean of the two pipelines' last losses)
# and the wall time (loss versus time at the end point).
#
#   bench/run_avgpipe.sh [BUILD_DIR] [MODEL] [BATCH] [STEPS] [REPEATS]
# Default model: the GPT fixture on its training rows (tests/fixtures/gpt/train/sgd).
# Each configuration runs REPEATS (3) times; the median samples/s is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-gpt} batch=${3:-32} steps=${4:-60} reps=${5:-3}
fx=tests/fixtures/$model
data=(--data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy")
common=(train "$fx/model.onnx" "${data[@]}" --batch "$batch" --steps "$steps" --no-shuffle --threads 1 --lr 0.01)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
final() { grep -o 'final loss [0-9.]*' <<<"$1" | tail -1 | cut -d' ' -f3; }
secs() { grep -o 'in [0-9.]* s' <<<"$1" | tail -1 | cut -d' ' -f2; }
# median over $reps runs of "pdonnx ARGS": prints "samples/s final_loss seconds"
run() {
  local out all=()
  for _ in $(seq "$reps"); do
    out=$("$build/pdonnx" "$@")
    all+=("$(rate "$out") $(final "$out") $(secs "$out")")
  done
  printf '%s\n' "${all[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p"
}
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$model, batch $batch per pipeline, $steps SGD steps (lr 0.01), one thread per stage, median of $reps runs"
echo
echo "| configuration | workers | samples/s | vs 1 stage on 1 core | final loss | seconds |"
echo "|---|---|---|---|---|---|"
read -r r1 l1 t1 <<<"$(run "${common[@]}")"
echo "| 1 stage, 1 core | 1 | $r1 | 1.00 | $l1 | $t1 |"
row() { # row LABEL WORKERS ARGS...
  local label=$1 w=$2 r l t
  shift 2
  read -r r l t <<<"$(run "${common[@]}" "$@")"
  awk -v a="$label" -v w="$w" -v r="$r" -v r1="$r1" -v l="$l" -v t="$t" \
    'BEGIN { printf "| %s | %d | %s | %.2f | %s | %s |\n", a, w, r, r / r1, l, t }'
}
row "1 pipeline x 2 stages, flush, 4 microbatches" 2 --stages 2 --schedule flush --microbatches 4
row "1 pipeline x 2 stages, 2bw, 4 microbatches" 2 --stages 2 --schedule 2bw --microbatches 4
row "1 pipeline x 2 stages, avgpipe, 4 microbatches (K = 1)" 2 --stages 2 --schedule avgpipe --microbatches 4 \
  --parallel-pipelines 1 --average-every 0
row "2 pipelines x 1 stage, avgpipe, 4 microbatches (K = 2, alpha 0.25 every 4)" 2 --stages 1 --schedule avgpipe \
  --microbatches 4 --parallel-pipelines 2 --elastic-alpha 0.25 --average-every 4
echo
# the tuner on a profile measured at the microbatch size, for the same two workers
prof=$(mktemp)
trap 'rm -f "$prof" "$prof.plan"' EXIT
"$build/pdonnx" profile "$fx/model.onnx" --batch $((batch / 4)) --threads 1 -o "$prof" --quiet >/dev/null
"$build/pdonnx" plan --profile "$prof" --workers 2 --algo avgpipe -o "$prof.plan" | grep -E "^plan for|^predicted|^avgpipe:" |
  sed "s|$prof|the profile|; s/^/    /"
