#!/usr/bin/env bash
# export_memory.sh - `pdonnx export`'s peak resident memory (docs/PERF.md,
# docs/CHECKPOINT.md "Export streams"): a wide MLP whose weights are external
# data (tests/gen_mlp) trained a few steps as P stages in one process with a
# checkpoint at the end, then exported streamed (the default) and the old way
# (PDONNX_LAZY_WEIGHTS=0: the whole model and every part in memory at once);
# the two models' initializers are checked bitwise equal (tests/initcmp).
# Prints a Markdown table for docs/PERF.md. Peaks from tests/peakrss.
#
#   bench/export_memory.sh [BUILD_DIR] [LAYERS] [WIDTH] [OPTIMIZER]
# Default: 8 hidden layers of 2048 (128 MiB of float32 weights), adam.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} layers=${2:-8} width=${3:-2048} opt=${4:-adam}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
mkdir -p "$tmp/m"
"$build/tests/gen_mlp" "$tmp/m" "$layers" "$width" 64
echo "| stages | largest part | whole model and every part | streamed |"
echo "|---|---|---|---|"
for P in 2 4; do
  "$build/pdonnx" train "$tmp/m/mlp.onnx" --data "$tmp/m/x.npy" --labels "$tmp/m/y.npy" --steps 3 --batch 8 \
    --microbatches 2 --optimizer "$opt" --stages "$P" --checkpoint-dir "$tmp/ck$P" --checkpoint-every 3 --quiet > /dev/null
  "$build/tests/peakrss" "$tmp/new$P" "$build/pdonnx" export "$tmp/ck$P" -o "$tmp/n$P.onnx" > /dev/null
  PDONNX_LAZY_WEIGHTS=0 "$build/tests/peakrss" "$tmp/old$P" "$build/pdonnx" export "$tmp/ck$P" -o "$tmp/o$P.onnx" > /dev/null
  "$build/tests/initcmp" "$tmp/o$P.onnx" "$tmp/n$P.onnx" > /dev/null
  big=$(stat -c %s "$tmp/ck$P"/ckpt-*/part-*.bin | sort -n | tail -1)
  echo "| $P | $((big / 1048576)) MiB | $(($(cat "$tmp/old$P.0") / 1024)) MiB | $(($(cat "$tmp/new$P.0") / 1024)) MiB |"
  rm -rf "$tmp/ck$P" "$tmp/n$P.onnx"* "$tmp/o$P.onnx"
done
