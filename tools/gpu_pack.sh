#!/usr/bin/env bash
# gpu_pack.sh - packs what a GPU machine without this project's build
# dependencies needs to run the CUDA tests and benchmark (tests/run_gpu.sh,
# bench/run_cuda.sh): a -Dcuda=enabled build without MPI, its executables,
# libpipedream and the CUDA module beside it in lib/ (libpdcuda.so, which
# libpipedream loads from its own directory on the first CUDA call), and the
# non-CUDA shared libraries they load (OpenBLAS, protobuf-c, cJSON, gfortran,
# quadmath, gomp), into one folder. The CUDA libraries (cudart, cuBLAS,
# cuBLASLt, cuDNN) are the GPU machine's own: the module links them, and
# tests/run_gpu.sh puts them on LD_LIBRARY_PATH.
# The build has no oneDNN (-Donednn=disabled): libdnnl.so.2 (and the
# libOpenCL.so.1 it needs) would not fit a device call's 64 MiB, and the GPU
# path does not use it. The script ends with tools/gpu_pack_check.sh: every
# library a packed binary needs is in the pack or is one a bare CUDA machine
# has, and the pack is under 60 MiB.
#
#   tools/gpu_pack.sh [BUILD_DIR (build-gpu)] [OUT_DIR (build-gpu-pack)]
# OUT_DIR must be a path git ignores (.gitignore ignores /build*/). The
# OpenMP OpenBLAS alone is 35 MiB, so the pack and the working tree together
# pass the 64 MiB a device call carries: the script also writes the pack as
# OUT_DIR-xz/pack.tar.xz (8 MiB), the folder to carry. Then, on the GPU
# machine, from the repository root (carry: ["OUT_DIR-xz"]), after
# `tar xJf OUT_DIR-xz/pack.tar.xz`:
#   tests/run_gpu.sh build-gpu-pack      # every GPU test, OK / NOT OK lines, exit 0 when all pass
#   bench/run_cuda.sh build-gpu-pack     # the benchmark's Markdown table
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu} out=${2:-build-gpu-pack}
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" -Dcuda=enabled -Dmpi=disabled -Donednn=disabled >/dev/null
else
  meson setup "$build" -Dcuda=enabled -Dmpi=disabled -Donednn=disabled --buildtype=release >/dev/null
fi
ninja -C "$build" -j2 pdonnx libpdcuda.so tests/test_cuda tests/test_train tests/test_cuda_module tests/test_pipeline tests/test_checkpoint \
  tests/test_avgpipe bench/bench_train >/dev/null
rm -rf "$out"
mkdir -p "$out/tests" "$out/bench" "$out/lib"
cp "$build/pdonnx" "$out/"
cp "$build/tests/test_cuda" "$build/tests/test_train" "$build/tests/test_cuda_module" "$build/tests/test_pipeline" \
  "$build/tests/test_checkpoint" "$build/tests/test_avgpipe" "$out/tests/"
cp "$build/bench/bench_train" "$out/bench/"
# the tests link libpdinternal.so, bench_train libpipedream.so.0, pdonnx the static library
cp -L "$build"/libpipedream.so.0 "$build"/libpdinternal.so "$build"/libpdcuda.so "$out/lib/"
# the non-CUDA libraries the executables load, as this machine resolves them
ldd "$build/pdonnx" "$build/libpipedream.so.0" "$build/libpdinternal.so" | awk '/=> \// {print $3}' | sort -u |
  grep -E 'openblas|protobuf-c|cjson|gfortran|quadmath|gomp|libz\.' | while read -r f; do cp -L "$f" "$out/lib/"; done
du -sh "$out"
tools/gpu_pack_check.sh "$out"
rm -rf "$out-xz" && mkdir -p "$out-xz" && tar cf - "$out" | xz -T2 -6 >"$out-xz/pack.tar.xz"
du -sh "$out-xz/pack.tar.xz"
