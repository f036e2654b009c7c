#!/usr/bin/env bash
# setup.sh - installs what pdonnx needs on a fresh Debian machine, builds it,
# and runs the main job: trains the bundled default model on the bundled digits.
#
#   tools/setup.sh            install packages (apt-get, needs root), build, run
#   tools/setup.sh --no-install   skip apt-get (packages already there)
#   tools/setup.sh --werror   build with warnings as errors (CI)
#   tools/setup.sh --dev      also install what regenerates fixtures (python3-torch ...)
set -euo pipefail
cd "$(dirname "$0")/.."

install=1 werror=() dev=0
for a in "$@"; do
  case "$a" in
    --no-install) install=0 ;;
    --werror) werror=(--werror) ;;
    --dev) dev=1 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

pkgs=(build-essential meson ninja-build pkg-config
      libprotobuf-c-dev protobuf-c-compiler libonnx-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev libcjson-dev zlib1g-dev
      clang libclang-rt-14-dev valgrind libopenmpi-dev openmpi-bin xz-utils)
devpkgs=(python3-torch python3-onnx python3-numpy python3-sklearn)

if [ "$install" = 1 ]; then
  missing=()
  want=("${pkgs[@]}")
  [ "$dev" = 1 ] && want+=("${devpkgs[@]}")
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

if [ ! -f build/build.ninja ]; then
  meson setup build "${werror[@]}"
elif [ "${#werror[@]}" -gt 0 ]; then
  meson configure build -Dwerror=true
fi
ninja -C build

echo
echo "== pdonnx train examples/digits_mlp.onnx"
./build/pdonnx train examples/digits_mlp.onnx --save build/digits_mlp.trained.onnx
