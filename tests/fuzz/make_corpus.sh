#!/bin/sh
# make_corpus.sh OUT [ONNX_TESTS] - seeds the model-loader fuzzer with ONNX's own
# test models (small ones: the fuzzer mutates better), one file per case.
set -eu
out=${1:?usage: make_corpus.sh OUT [ONNX_TESTS]}
src=${2:-$(dirname "$0")/../../../shared/onnx-tests}
mkdir -p "$out"
n=0
for m in "$src"/*/*/model.onnx; do
  [ -f "$m" ] || continue
  [ "$(wc -c < "$m")" -le 65536 ] || continue
  case_dir=$(dirname "$m")
  cp "$m" "$out/$(basename "$(dirname "$case_dir")")-$(basename "$case_dir").onnx"
  n=$((n + 1))
done
echo "make_corpus.sh: $n seeds in $out"
