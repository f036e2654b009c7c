#!/usr/bin/env bash
# run_cuda.sh - issue 6's benchmark on one GPU (bench/cuda_bench.py): pdonnx
# --device cuda next to PyTorch eager and torch.compile, GPT-2-small-shaped and
# ResNet-50-shaped models, bf16 and fp32; one Markdown table for docs/PERF.md.
# Fits one 10-minute call (a 570 s budget; runs that would not fit are
# skipped, a failing one leaves its cell).
#
#   bench/run_cuda.sh [BIN (build-gpu-pack)] [cuda_bench.py flags, e.g. --models gpt --no-compile]
# BIN: a folder packed by tools/gpu_pack.sh, or a -Dcuda=enabled build dir.
# Needs python3 with torch and onnx (the GPU machines' image has both).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:-build-gpu-pack}" && pwd)
[ $# -gt 0 ] && shift
. tests/gpu_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi -L 2>/dev/null || true
exec python3 bench/cuda_bench.py --build "$bin" --ld-path "$PD_GPU_LIBS" "$@"
