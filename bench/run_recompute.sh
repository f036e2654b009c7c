#!/usr/bin/env bash
# run_recompute.sh - activation recomputation's price and gain (issue 21):
# the same plan trained with and without --recompute under each schedule, in
# one run; prints a Markdown table for docs/PERF.md with every stage's peak
# activations (the run summary's figure), the throughput, and whether the
# two saved models are byte-identical.
#
#   bench/run_recompute.sh [BUILD_DIR] [BATCH] [STEPS]
# Default: the GPT fixture on its training rows (tests/fixtures/gpt/train/sgd),
# global batch 64 in 4 microbatches, 100 SGD steps, one thread per stage, on
# a straight 2-stage plan made once (pdonnx plan), so both runs cut the model
# the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} batch=${2:-64} steps=${3:-100}
fx=tests/fixtures/gpt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$build/pdonnx" plan "$fx/model.onnx" --batch $((batch / 4)) --workers 2 --straight --microbatches 4 \
  -o "$tmp/plan.json" >/dev/null
common=(train "$fx/model.onnx" --data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy" --batch "$batch"
  --steps "$steps" --no-shuffle --threads 1 --lr 0.01 --plan "$tmp/plan.json" --microbatches 4)
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
# stage S's peak activations as the summary prints them ("2 mb, 1.3 MB"); its busy ms (F, B, W, STEP)
peak() { awk -v s="$2" '$1 == s && $6 == "mb," { print $5 " mb, " $7 " " $8 }' <<<"$1"; }
busy() { awk -v s="$2" '$1 == s && $6 == "mb," { print $3 }' <<<"$1"; }
REPEATS=${REPEATS:-3}
run() { # the output of the run with the median throughput of REPEATS
  local outs=() rates=() i mid
  for ((i = 0; i < REPEATS; i++)); do
    outs[i]=$("$build/pdonnx" "$@")
    rates[i]="$(rate "${outs[i]}") $i"
  done
  mid=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(((REPEATS + 1) / 2))p" | cut -d' ' -f2)
  printf '%s\n' "${outs[mid]}"
}
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "gpt, global batch $batch in 4 microbatches, $steps SGD steps, 2 stages, one thread each; median of $REPEATS runs"
echo
echo "| schedule | stage 0 peak | stage 1 peak | samples/s | --recompute: stage 0 | stage 1 | samples/s | stage 0 busy | simulated time | models |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for s in gpipe flush zb-h1 2bw; do
  a=$(run "${common[@]}" --schedule "$s" --save "$tmp/a.onnx")
  b=$(run "${common[@]}" --schedule "$s" --recompute --save "$tmp/b.onnx")
  # the simulator's time per minibatch for the plan's profile, with and without
  simt() { "$build/pdonnx" simulate "$tmp/plan.json" --schedule "$s" --microbatches 4 "$@" | awk '/^time per minibatch/ { print $4 }'; }
  sa=$(simt) sb=$(simt --recompute)
  same=differ
  cmp -s "$tmp/a.onnx" "$tmp/b.onnx" && same=identical
  awk -v s="$s" -v a0="$(peak "$a" 0)" -v a1="$(peak "$a" 1)" -v ra="$(rate "$a")" -v b0="$(peak "$b" 0)" \
    -v b1="$(peak "$b" 1)" -v rb="$(rate "$b")" -v same="$same" -v ba="$(busy "$a" 0)" -v bb="$(busy "$b" 0)" \
    -v sa="$sa" -v sb="$sb" \
    'BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %+.0f%% | %+.0f%% | %s |\n", s, a0, a1, ra, b0, b1, rb,
             100 * (bb / ba - 1), 100 * (sb / sa - 1), same }'
done
