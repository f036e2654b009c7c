#!/usr/bin/env bash
# cpu_pack.sh - packs what another x86-64 machine without this project's
# build dependencies needs to run bench/run_realistic.sh there: a release
# build with oneDNN and without MPI or CUDA, its bench_train and pdonnx,
# libpipedream, and the shared libraries they load (OpenMP OpenBLAS, oneDNN
# and the libOpenCL it needs, protobuf-c, cJSON, zlib, gomp, gfortran,
# quadmath) in lib/. bench/run_realistic.sh takes the folder as its
# BUILD_DIR and puts lib/ on LD_LIBRARY_PATH. Also written as
# OUT_DIR-xz/pack.tar.xz, the folder a device call carries (OpenBLAS and
# oneDNN are 73 MiB unpacked). Used for the realistic table on a quiet
# many-core host (docs/PERF.md, "The same table on a quiet host").
#
#   bench/cpu_pack.sh [BUILD_DIR (build-cpu)] [OUT_DIR (build-cpu-pack)]
#   # there, with OUT_DIR-xz carried: tar xJf OUT_DIR-xz/pack.tar.xz, then
#   PD_BENCH_PYTHON=python3 bench/run_realistic.sh build-cpu-pack
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cpu} out=${2:-build-cpu-pack}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=disabled -Dmpi=disabled -Donednn=enabled --buildtype=release >/dev/null
fi
ninja -C "$build" -j2 pdonnx bench/bench_train >/dev/null
rm -rf "$out"
mkdir -p "$out/bench" "$out/lib"
cp "$build/pdonnx" "$out/"
cp "$build/bench/bench_train" "$out/bench/"
cp -L "$build/libpipedream.so.0" "$out/lib/"
ldd "$build/pdonnx" "$build/libpipedream.so.0" "$build/bench/bench_train" | awk '/=> \// {print $3}' | sort -u |
  grep -E 'openblas|dnnl|OpenCL|protobuf-c|cjson|gfortran|quadmath|gomp|libz\.' | while read -r f; do cp -L "$f" "$out/lib/"; done
# every library the packed files need is packed or is the C and C++ runtime any
# host has: the GPU pack's check (DT_NEEDED, not this machine's ldd), the
# unpacked folder allowed 100 MiB (what travels is the .xz)
tools/gpu_pack_check.sh "$out" 100
rm -rf "$out-xz" && mkdir -p "$out-xz" && tar cf - "$out" | xz -T2 -6 >"$out-xz/pack.tar.xz"
du -sh "$out" "$out-xz/pack.tar.xz"
