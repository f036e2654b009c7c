#!/usr/bin/env bash
# run.sh - fuzzes the ONNX loader for a bounded time, then the profile
# readers and planners (SECONDS/2) and the checkpoint reader (SECONDS/4).
#   tests/fuzz/run.sh BUILD_DIR SECONDS
# BUILD_DIR is configured with -Dfuzz=true (clang). The loader's seed corpus
# is the fixture models (control-flow ones included) plus a sample of ONNX's
# test models and its If/Loop/Scan cases when ../shared is there; the checkpoint reader's is tests/fuzz/ckpt/ (real checkpoints).
# Exits non-zero when libFuzzer finds a crash, leak or sanitizer error.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1 secs=${2:-60}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
i=0
for m in tests/fixtures/*/model.onnx tests/fixtures/flow/*.onnx tests/fixtures/flow/cases/*/model.onnx examples/*.onnx tests/fuzz/regressions/*.onnx; do
  cp "$m" "$corpus/seed$((i++)).onnx"
done
if [ -d ../shared/onnx-tests ]; then
  for m in $(ls -d ../shared/onnx-tests/{node,simple,pytorch-operator}/*/model.onnx 2>/dev/null | awk 'NR % 12 == 0'); do
    cp "$m" "$corpus/seed$((i++)).onnx"
  done
  # control flow (subgraph attributes, unrolled at load: onnx/flow.c), every case
  for t in if loop11 scan9_sum scan9_scalar scan9_multi_state scan_sum range_float_type_positive_delta_expanded \
    affine_grid_2d_expanded affine_grid_3d_align_corners_expanded linear_attention_gated_delta_expanded; do
    m=../shared/onnx-tests/node/test_$t/model.onnx
    [ -f "$m" ] && cp "$m" "$corpus/seed$((i++)).onnx"
  done
  # the low-bit types' packed data and the attributes of the ops added for issue 19
  for t in cast_FLOAT_to_FLOAT8E4M3FN cast_FLOAT_to_INT2 dequantizelinear_int4 quantizelinear_float4e2m1 \
    bitcast_float32_to_int32 deform_conv_with_mask_bias det_nd tensorscatter_circular bernoulli_seed \
    resize_downsample_scales_cubic_antialias resize_tf_crop_and_resize einsum_batch_diagonal lstm_with_peepholes \
    linear_attention_gated_delta causal_conv_with_state_basic flexattention flexattention_causal_mask tfidfvectorizer_tf_batch_uniandbigrams_skip5 adam; do
    m=../shared/onnx-tests/node/test_$t/model.onnx
    [ -f "$m" ] && cp "$m" "$corpus/seed$((i++)).onnx"
  done
fi
echo "fuzzing the loader for ${secs}s from $i seeds"
"$build/tests/fuzz_load" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 "$corpus" 2>&1 | tail -15

# profiles and planners: PipeDream's small profiles and a JSON one as seeds
pcorpus=$(mktemp -d)
trap 'rm -rf "$corpus" "$pcorpus"' EXIT
j=0
for m in ../shared/pipedream-profiles/{alexnet,vgg16,resnet18,squeezenet1_0}/graph.txt tests/fuzz/regressions/*.profile; do
  [ -f "$m" ] && cp "$m" "$pcorpus/seed$((j++)).txt"
done
printf '{"format":"pdonnx-profile","version":1,"nodes":[{"name":"a","fwd_ms":1,"bwd_in_ms":1,"param_bytes":4},{"name":"b","fwd_ms":2}],"edges":[["a","b"]]}' >"$pcorpus/seed$((j++)).json"
psecs=$(( secs / 2 > 10 ? secs / 2 : 10 ))
echo "fuzzing the profile readers and planners for ${psecs}s from $j seeds"
"$build/tests/fuzz_profile" -max_total_time="$psecs" -rss_limit_mb=2048 -max_len=16384 -timeout=10 -print_final_stats=1 "$pcorpus" 2>&1 | tail -15

# checkpoints: manifest and parts in one input (fuzz_ckpt.c), from real ones
ccorpus=$(mktemp -d)
trap 'rm -rf "$corpus" "$pcorpus" "$ccorpus"' EXIT
cp tests/fuzz/ckpt/*.ckpt "$ccorpus/"
csecs=$(( secs / 4 > 10 ? secs / 4 : 10 ))
echo "fuzzing the checkpoint reader for ${csecs}s from $(ls "$ccorpus" | wc -l) seeds"
"$build/tests/fuzz_ckpt" -max_total_time="$csecs" -rss_limit_mb=2048 -max_len=32768 -timeout=10 -print_final_stats=1 "$ccorpus" 2>&1 | tail -15
