#!/usr/bin/env bash
# run_pipeline.sh - the same model and global batch trained by one stage on one
# core and by two stages on two cores (one thread each) with each schedule, in
# one run; prints a Markdown table for docs/PERF.md with the throughput ratio
# over one core beside the simulator's (its one worker runs the whole batch as
# one call per node, so microbatches' extra calls count: tools/train.c's step
# line) and the simulator's bubble for the same plan beside the one measured.
#
#   bench/run_pipeline.sh [BUILD_DIR] [MODEL] [BATCH] [STEPS]
# Default: the GPT fixture on its training rows (tests/fixtures/gpt/train/sgd),
# global batch 64 (issue 5's figures, docs/PERF.md), 200 steps. MODEL may also
# be a folder holding model.onnx, X.npy and Y.npy (issue 23's realistic GPT:
# bench/run_pipeline.sh build build/bench-realistic/gpt 8 20, once
# run_realistic.sh exported it and X.npy, Y.npy are written beside it).
# BUILD_DIR may be a folder packed by bench/cpu_pack.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} model=${2:-gpt} batch=${3:-64} steps=${4:-200}
[ -f "$build/build.ninja" ] || export LD_LIBRARY_PATH="$(cd "$build" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fx=tests/fixtures/$model
data=(--data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy")
if [ -f "$model/model.onnx" ]; then # a folder with model.onnx, X.npy and Y.npy (bench/run_realistic.sh's gpt)
  fx=$model
  data=(--data "$fx/X.npy" --labels "$fx/Y.npy")
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(train "$fx/model.onnx" "${data[@]}" --batch "$batch" --steps "$steps" --no-shuffle --threads 1 --lr 0.01)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
rate() { grep -o '[0-9.]* samples/s' <<<"$1" | tail -1 | cut -d' ' -f1; }
# run ARGS...: the output of the run with the median throughput of $REPEATS
# (default 3) back-to-back runs: a shared VM's run-to-run noise is +-25%
REPEATS=${REPEATS:-3}
run() {
  local outs=() rates=() i
  for ((i = 0; i < REPEATS; i++)); do
    outs[i]=$("$build/pdonnx" "$@")
    rates[i]="$(rate "${outs[i]}") $i"
  done
  local mid
  mid=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(((REPEATS + 1) / 2))p" | cut -d' ' -f2)
  printf '%s\n' "${outs[mid]}"
}
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "$model, global batch $batch, $steps SGD steps, one thread per stage; each figure the median of $REPEATS runs"
echo
echo "| configuration | samples/s | vs 1 stage on 1 core | simulated | bubble measured | bubble simulated |"
echo "|---|---|---|---|---|---|"
one=$(run "${common[@]}")
r1=$(rate "$one")
echo "| 1 stage, 1 core | $r1 | 1.00 | | | |"
# simulated OUT: the simulator's speedup over one worker on the whole batch
simulated() { grep -o 'the pipeline [0-9.]*x as fast' <<<"$1" | grep -o '[0-9.]*x' || echo -; }
# pipedream updates per microbatch (a minibatch is one); 2bw twice, as its
# smallest valid count (PipeDream-2BW: microbatches >= stages) and with 4
for sm in gpipe:4 flush:4 pipedream:1 2bw:2 2bw:4; do
  s=${sm%:*} mb=${sm#*:}
  out=$(run "${common[@]}" --stages 2 --schedule "$s" --microbatches "$mb")
  r=$(rate "$out")
  b=$(grep -o 'bubble: [0-9.]*% measured, [0-9.]*% simulated' <<<"$out" | sed 's/bubble: //; s/ measured, / | /; s/ simulated//')
  awk -v s="$s" -v mb="$mb" -v r="$r" -v r1="$r1" -v b="$b" -v x="$(simulated "$out")" \
    'BEGIN { printf "| 2 stages, %s, %d microbatch%s | %s | %.2f | %s | %s |\n", s, mb, mb == 1 ? "" : "es", r, r / r1, x, b }'
done
# 2-way data parallelism: one stage replicated on both cores (threads), each
# replica half of every minibatch, gradients summed before the update
"$build/pdonnx" plan "$fx/model.onnx" --workers 1 --batch $((batch / 2)) -o "$tmp/dp.json" > /dev/null
python3 - "$tmp/dp.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["replicas"] = 2
p["stages"][0]["ranks"] = [0, 1]
p["workers"] = 2
json.dump(p, open(sys.argv[1], "w"))
EOF
out=$(run "${common[@]}" --plan "$tmp/dp.json" --schedule flush --microbatches 2)
r=$(rate "$out")
b=$(grep -o 'bubble: [0-9.]*% measured, [0-9.]*% simulated' <<<"$out" | sed 's/bubble: //; s/ measured, / | /; s/ simulated//')
awk -v r="$r" -v r1="$r1" -v b="$b" -v x="$(simulated "$out")" \
  'BEGIN { printf "| 2-way data parallelism (1 stage, 2 replicas) | %s | %.2f | %s | %s |\n", r, r / r1, x, b }'
