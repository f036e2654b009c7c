#!/usr/bin/env bash
# run_gpu.sh - every CUDA test on a GPU machine, from a folder packed by
# tools/gpu_pack.sh (or a build dir: BIN/pdonnx, BIN/tests/..., BIN/bench/...),
# without meson (the GPU machines lack this project's build dependencies).
# Prints each test's OK / NOT OK lines; exits 0 when every test passed.
#
#   tests/run_gpu.sh BIN [--sanitize]
#     --sanitize: test_cuda again under compute-sanitizer memcheck, racecheck,
#                 initcheck and synccheck (minutes; the op tests only)
set -u
cd "$(dirname "$0")/.."
bin=$(cd "${1:?usage: tests/run_gpu.sh BIN [--sanitize]}" && pwd)
sanitize=${2:-}
. tests/gpu_env.sh
export LD_LIBRARY_PATH="$PD_GPU_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=passive
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"
failed=0
t() { # t NAME CMD...: one test; 77 is a skip
  echo "=== $1"
  shift
  "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then echo "=== PASS"; elif [ $rc -eq 77 ]; then echo "=== SKIP"; failed=1; else echo "=== FAIL (rc $rc)"; failed=1; fi
}
fx=tests/fixtures
# the CUDA module (libpdcuda.so) is loaded from beside libpipedream on the first CUDA call
t "cuda-module (loaded on demand; a CUDA session trains)" "$bin/tests/test_cuda_module" lazy examples/digits_mlp.onnx
t "cuda (every op against the CPU backend)" "$bin/tests/test_cuda"
t "train-cuda-fp32 (PyTorch trajectories, 1e-4)" "$bin/tests/test_train" --device cuda "$fx"
spread=$fx/reduced_precision_spread.txt # PyTorch's own distance in tf32/bf16: 3x it bounds ours
t "train-cuda-tf32 (3x PyTorch's tf32 spread, else 3e-2)" "$bin/tests/test_train" --device cuda --precision tf32 --tol 3e-2 --spread "$spread" "$fx"
t "train-cuda-bf16 (3x PyTorch's bf16 spread, else 1e-1)" "$bin/tests/test_train" --device cuda --precision bf16 --tol 1e-1 --spread "$spread" "$fx"
t "pipeline-cuda (2-4 stages on one GPU against one stage, 1e-4)" "$bin/tests/test_pipeline" --device cuda "$fx"
t "checkpoint-cuda (snapshots and bitwise resume of GPU stages)" "$bin/tests/test_checkpoint" --device cuda "$fx"
t "avgpipe-cuda (2-3 parallel pipelines of GPU stages against CPU stages, 1e-3)" "$bin/tests/test_avgpipe" --device cuda "$fx"
t "cli-cuda" tests/test_cli_cuda.sh "$bin/pdonnx" .
# GPU stages in two processes over NCCL: only from a build with MPI and NCCL, on two GPUs or more
if [ -x "$bin/tests/test_nccl" ] && command -v mpirun >/dev/null && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  t "nccl-pipeline (2 processes, a GPU each)" tests/test_nccl_pipe.sh "$bin/pdonnx" . "$bin/tests/test_nccl"
fi
if [ "$sanitize" = --sanitize ]; then
  for tool in memcheck racecheck initcheck synccheck; do
    # API errors unreported: every one is checked by the code, and test_cuda provokes cudaMalloc failures
    t "compute-sanitizer --tool $tool test_cuda" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 1 "$bin/tests/test_cuda"
  done
fi
[ $failed -eq 0 ] && echo "all GPU tests passed" || echo "some GPU tests failed or were skipped"
exit $failed
