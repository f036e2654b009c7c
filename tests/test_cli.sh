#!/usr/bin/env bash
# test_cli.sh - the pdonnx tool end to end: good runs produce the right files,
# bad input gives one line naming the culprit, a non-zero exit and no crash.
#   test_cli.sh PDONNX SOURCE_DIR TEST_LOADER NPYTOOL
set -u
pdonnx=$1 src=$2
# absolute: meson may pass ./pdonnx, and the zoo runs cd into the model's folder
case $pdonnx in /*) ;; *) pdonnx=$PWD/$pdonnx ;; esac
fx=$src/tests/fixtures
. "$src/tests/common.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ERR_STDOUT=quiet-run # refusals may follow start-up lines ("using default flags from ..."), never training

# --- good runs
if "$pdonnx" run "$fx/mlp/model.onnx" --input x="$fx/mlp/x.npy" --output y="$tmp/y.npy" >"$tmp/out" 2>&1 \
   && [ -s "$tmp/y.npy" ] && grep -q "wrote y" "$tmp/out"; then
  ok "run writes the output .npy"
else
  bad "run writes the output .npy: $(cat "$tmp/out")"
fi
if "$pdonnx" run "$fx/mlp/model.onnx" --input "$fx/mlp/x.npy" >"$tmp/out" 2>&1 && grep -q "^y float32\[4,10\]" "$tmp/out"; then
  ok "run with an unnamed input binds the batch from the file and summarises y"
else
  bad "run summary: $(cat "$tmp/out")"
fi
if "$pdonnx" info "$fx/gpt/model.onnx" --batch 3 >"$tmp/out" 2>&1 && grep -q "int64\[3,16\]" "$tmp/out" \
   && grep -q "^total: " "$tmp/out" && ! grep -q " Shape " "$tmp/out"; then
  ok "info binds --batch and folds the shape subgraphs away"
else
  bad "info: $(head -20 "$tmp/out")"
fi
"$pdonnx" --version | grep -q "^pdonnx " && ok "--version" || bad "--version"
# what the start-up lines say about exporters' doings (the zoo's real exports)
zoo=$src/tests/zoo
zoo_train() { (cd "$zoo/$1" && "$pdonnx" train model.onnx --data X.npy --labels Y.npy --batch 4 --steps 1 "${@:2}") >"$tmp/out" 2>&1; }
if zoo_train gpt2-ts && grep -q "^the model ties 1 initializer to others ('onnx::MatMul_[0-9]*' = 'm.transformer.wte.weight' transposed)" "$tmp/out" \
   && grep -q "28 parameter tensors (7872 floats)" "$tmp/out" && zoo_train gpt2-ts --untie && grep -q "^untied 1 initializer" "$tmp/out" \
   && grep -q "29 parameter tensors (8896 floats)" "$tmp/out"; then
  ok "train names a tied LM head stored as a transpose and trains it as one; --untie trains it apart"
else
  bad "tied LM head: $(head -5 "$tmp/out")"
fi
if zoo_train llama-dynamo && grep -q "^not trained: 2 float initializers (unsqueeze_14 \[1,1,8,4\], unsqueeze_15 \[1,1,8,4\]): the exporter's graph signature" "$tmp/out" \
   && grep -q "^not trained: 3 float initializers (.*): one element" "$tmp/out"; then
  ok "train leaves dynamo's rotary tables untrained and says why, one line per reason"
else
  bad "dynamo constants: $(head -5 "$tmp/out")"
fi
# a dynamic sequence length is bound from the data's rows (X.npy is [10, 8])
if zoo_train gpt2-dynamo && grep -q "^trained 1 steps" "$tmp/out" && grep -q "28 parameter tensors (7872 floats)" "$tmp/out"; then
  ok "train binds a symbolic sequence length from --data's rows"
else
  bad "symbolic sequence length from the data: $(head -5 "$tmp/out")"
fi
# a model.half() export trains in float32 and is saved in float16
if zoo_train gpt2_fp16-ts --save "$tmp/half.onnx" && grep -q "^note: float16/bfloat16 computed in float32: 14 tensors and 3 node attributes" "$tmp/out" \
   && "$pdonnx" info "$tmp/half.onnx" --batch 4 >"$tmp/info" 2>&1 && grep -q "note: float16/bfloat16 computed in float32: 14 tensors and 3 node attributes" "$tmp/info" \
   && ! cmp -s "$tmp/half.onnx" "$zoo/gpt2_fp16-ts/model.onnx"; then
  ok "a float16 export trains in float32 and is saved with its float16 tensors, trained"
else
  bad "float16 export: $(head -5 "$tmp/out") / $(head -3 "$tmp/info")"
fi
# GPT-2 exported by dynamo with a static sequence length: wpe folded into its rows
(cd "$zoo/gpt2-dynamo" && "$pdonnx" train ../folded/gpt2-dynamo-static-t.onnx --data X.npy --labels Y.npy --batch 4 --steps 1) >"$tmp/out" 2>&1
if grep -q "^note: 'embedding_1' \[1,8,16\] is parameter 'm.transformer.wpe.weight' folded by the exporter" "$tmp/out"; then
  ok "train notes a parameter the dynamo exporter folded away"
else
  bad "folded parameter note: $(head -5 "$tmp/out")"
fi

# every command prints its flag table with --help
for c in info run train profile plan simulate schedule export conformance; do
  if "$pdonnx" "$c" --help >"$tmp/help" 2>&1 && grep -q "^usage: pdonnx $c" "$tmp/help" && grep -q "^  -" "$tmp/help"; then
    ok "$c --help prints its flags ($(grep -c '^  -' "$tmp/help"))"
  else
    bad "$c --help: $(head -3 "$tmp/help")"
  fi
done
# train --help prints its flag table: every train flag the README shows is in it
readme_flags=$(sed -n '/pdonnx train MODEL.onnx/,/--resume DIR/p' "$src/README.md" | grep -o -- '--[a-z0-9-]*' | sort -u)
if "$pdonnx" train --help >"$tmp/help" 2>&1 && [ -n "$readme_flags" ] &&
   missing=$(for f in $readme_flags; do grep -q -- "^  $f\b" "$tmp/help" || echo "$f"; done) && [ -z "$missing" ]; then
  ok "train --help lists every train flag of the README ($(echo $readme_flags | wc -w))"
else
  bad "train --help: missing $missing"
fi

# --- bad input
expect_error "missing model file" "nope.onnx" "$pdonnx" info "$tmp/nope.onnx"
head -c 1000 "$fx/mlp/model.onnx" >"$tmp/trunc.onnx"
expect_error "truncated model" "trunc.onnx" "$pdonnx" info "$tmp/trunc.onnx"
head -c 3000 /dev/urandom >"$tmp/junk.onnx"
expect_error "corrupt model" "junk.onnx" "$pdonnx" info "$tmp/junk.onnx"
expect_error "symbolic batch without --batch" "give --batch" "$pdonnx" info "$fx/mlp/model.onnx"
expect_error "wrong input shape" "input 'x': the shape given has rank 2, the model's has rank 4" \
  "$pdonnx" run "$fx/cnn_bn/model.onnx" --batch 4 --input x="$fx/mlp/x.npy"
expect_error "wrong input dtype" "input 'x' is float32 in the model, the value given is int64" \
  "$pdonnx" run "$fx/mlp/model.onnx" --batch 4 --input x="$fx/gpt/x.npy"
expect_error "unknown input name" "'z', which is not a runtime input" \
  "$pdonnx" run "$fx/mlp/model.onnx" --batch 4 --input z="$fx/mlp/x.npy"
expect_error "missing input" "input 'x' is not given" "$pdonnx" run "$fx/mlp/model.onnx" --batch 4
expect_error "missing .npy" "nothere.npy" "$pdonnx" run "$fx/mlp/model.onnx" --input x="$tmp/nothere.npy"
expect_error "bad --batch" "--batch expects an integer" "$pdonnx" info "$fx/mlp/model.onnx" --batch -3
expect_error "unknown flag" "unknown flag" "$pdonnx" info "$fx/mlp/model.onnx" --frobnicate
expect_error "unknown command" "unknown command 'trian'" "$pdonnx" trian
expect_error "unwritable output" "/nonexistent-dir/y.npy" \
  "$pdonnx" run "$fx/mlp/model.onnx" --input x="$fx/mlp/x.npy" --output y=/nonexistent-dir/y.npy

# inputs the fuzzer once crashed on (tests/fuzz/regressions/NAME.onnx, NAME.expect: the message)
for m in "$src"/tests/fuzz/regressions/*.onnx; do
  expect_error "fuzz regression $(basename "$m")" "$(cat "${m%.onnx}.expect")" "$pdonnx" info "$m" --batch 1
done

# bad models written by the loader test
if [ -n "${3:-}" ] && "$3" "$tmp/bad" >/dev/null 2>&1; then
  b=$tmp/bad
  expect_error "model with a cycle" "cycle" "$pdonnx" info "$b/cycle.onnx"
  expect_error "input nobody produces (missing initializer)" "node 'adder' (Add): input 'ghost'" "$pdonnx" info "$b/ghost.onnx"
  expect_error "unknown op" "node 'fb' (FooBar): operator FooBar is not supported" "$pdonnx" info "$b/foobar.onnx"
  expect_error "op of another domain" "domain 'com.example'" "$pdonnx" info "$b/domain.onnx"
  expect_error "dims whose product overflows" "initializer 'O'" "$pdonnx" info "$b/overflow.onnx"
  expect_error "raw_data of the wrong length" "initializer 'R'" "$pdonnx" info "$b/rawlen.onnx"
  expect_error "external data escaping the folder" "'../secret.bin'" "$pdonnx" info "$b/ext/m3.onnx"
  expect_error "external data through a symlink out" "'rellink.bin'" "$pdonnx" info "$b/ext/m6.onnx"
  expect_error "external data /etc/passwd" "'/etc/passwd'" "$pdonnx" info "$b/ext/m5.onnx"
else
  bad "the loader test could not write its bad models (${3:-no test_loader given})"
fi

# --- training
ex=$src/examples
npytool=${4:-}
if "$pdonnx" train "$ex/digits_mlp.onnx" --epochs 5 --metrics "$tmp/m.jsonl" --save "$tmp/trained.onnx" \
     >"$tmp/out" 2>&1; then
  steps=$(wc -l <"$tmp/m.jsonl")
  acc=$(sed -n 's/^validation: .*accuracy \([0-9.]*\)%.*/\1/p' "$tmp/out")
  if [ "$steps" -eq 225 ] && head -1 "$tmp/m.jsonl" | grep -q '"step": 1, "loss": [0-9.e-]*, "lr": 0.1, "samples_per_s"' \
     && awk -v a="$acc" 'BEGIN { exit !(a > 85) }'; then
    ok "train: default flags, 5 epochs = 225 steps of metrics, validation accuracy $acc%"
  else
    bad "train: $steps metric lines, accuracy '$acc': $(tail -3 "$tmp/out")"
  fi
  if "$pdonnx" run "$tmp/trained.onnx" --input x="$ex/digits/val_x.npy" --output y="$tmp/vy.npy" >/dev/null 2>&1 \
     && ! cmp -s "$tmp/trained.onnx" "$ex/digits_mlp.onnx"; then
    ok "train: --save writes a model pdonnx runs, with new weights"
  else
    bad "train: the saved model does not run"
  fi
else
  bad "train: $(tail -3 "$tmp/out")"
fi
# --freeze with a planned pipeline (--stages: the plan's profile ran sessions
# on the graph): --save lists only the trained tensors in training_info, as
# `pdonnx export` of the same run's checkpoint does; retraining each model
# says the frozen layer is not listed (before the fix --save listed fc1 too)
frz=(--steps 4 --stages 2 --freeze '^fc1' --checkpoint-dir "$tmp/frz_ck" --checkpoint-every 4 --quiet)
not_listed="not trained: 2 float initializers (fc1.weight \[128,64\], fc1.bias \[128\]): the model's training_info does not list it"
if "$pdonnx" train "$ex/digits_mlp.onnx" "${frz[@]}" --save "$tmp/frz.onnx" >"$tmp/out" 2>&1 &&
   "$pdonnx" export "$tmp/frz_ck" -o "$tmp/frz_exp.onnx" >>"$tmp/out" 2>&1; then
  for m in frz frz_exp; do
    "$pdonnx" train "$tmp/$m.onnx" --data "$ex/digits/train_x.npy" --labels "$ex/digits/train_y.npy" --steps 1 \
      >"$tmp/$m.log" 2>&1
  done
  if grep -q "^$not_listed" "$tmp/frz.log" && grep -q "^$not_listed" "$tmp/frz_exp.log"; then
    ok "train --freeze --stages 2 --save: frozen tensors are not listed as trained, as export's"
  else
    bad "train --freeze --save: $(head -2 "$tmp/frz.log") / export: $(head -2 "$tmp/frz_exp.log")"
  fi
else
  bad "train --freeze --stages 2: $(tail -3 "$tmp/out")"
fi
if [ -x "$npytool" ]; then
  d=$ex/digits
  "$npytool" set "$d/train_y.npy" "$tmp/y_bad.npy" 37 12
  expect_error "train: label out of range" "label 12 at row 37 is out of range [0, 10)" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --labels "$tmp/y_bad.npy" --quiet
  "$npytool" head "$d/train_y.npy" "$tmp/y_short.npy" 100
  expect_error "train: X and Y row counts differ" "has 1437 rows but $tmp/y_short.npy has 100" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --labels "$tmp/y_short.npy" --quiet
  "$npytool" cast "$d/train_y.npy" "$tmp/y_float.npy" float32
  expect_error "train: output shape does not fit the loss" "mse: targets of shape [32] do not fit the output [32,10]" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --labels "$tmp/y_float.npy" --quiet
  expect_error "train: float labels for cross_entropy" "labels do not fit --loss cross_entropy" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --labels "$tmp/y_float.npy" --loss cross_entropy --quiet
  # .npy data is mapped, not read: 128 MiB of rows cost no anonymous memory (the
  # file's pages stay the page cache's: resident while used, dropped under pressure)
  if "$npytool" tile "$d/train_x.npy" "$tmp/x_big.npy" 524288 && "$npytool" tile "$d/train_y.npy" "$tmp/y_big.npy" 524288; then
    # runs "$@" in the background; anon: its peak anonymous memory (KiB), rc: its exit status
    # (under ASan with its quarantine of freed blocks bounded: oneDNN's sgemm allocates and frees
    # a 16 KB buffer every call, and 256 MB of them held for use-after-free checks are not ours)
    peak_anon() {
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8" "$@" >/dev/null 2>&1 &
      local pid=$! a
      anon=0
      while kill -0 $pid 2>/dev/null; do
        a=$(awk '/^RssAnon:/ {print $2}' /proc/$pid/status 2>/dev/null)
        [ -n "$a" ] && [ "$a" -gt "$anon" ] && anon=$a
        sleep 0.05
      done
      wait $pid
      rc=$?
    }
    peak_anon "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x_big.npy" --labels "$tmp/y_big.npy" --steps 4000 --quiet
    if [ $rc -eq 0 ] && [ "$anon" -gt 0 ] && [ "$anon" -lt 65536 ]; then
      ok "train maps a 128 MiB data file: at most $((anon / 1024)) MiB of anonymous memory"
    else
      bad "train on a 128 MiB data file (rc $rc): $((anon / 1024)) MiB of anonymous memory"
    fi
    # a pipeline reads its steps' rows through a ring of a few steps: 2000 steps of 256 rows
    # (132 MiB, what it copied before) in a few MiB
    peak_anon "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x_big.npy" --labels "$tmp/y_big.npy" --stages 2 \
      --batch 256 --steps 2000 --quiet
    if [ $rc -eq 0 ] && [ "$anon" -gt 0 ] && [ "$anon" -lt 65536 ]; then
      ok "train --stages 2 on 132 MiB of steps' rows: at most $((anon / 1024)) MiB of anonymous memory"
    else
      bad "train --stages 2 on a 128 MiB data file (rc $rc): $((anon / 1024)) MiB of anonymous memory"
    fi
    rm -f "$tmp/x_big.npy" "$tmp/y_big.npy"
  fi
  # shards: --data 'x-*.npy' reads the files in order as one stream of rows (shuffled across them), and a
  # checkpoint taken on them resumes exactly
  for r in "0 500 a" "500 1000 b" "1000 1437 c"; do
    set -- $r
    "$npytool" slice "$d/train_x.npy" "$tmp/x-$3.npy" "$1" "$2" && "$npytool" slice "$d/train_y.npy" "$tmp/y-$3.npy" "$1" "$2"
  done
  lossgrad() { sed 's/"samples_per_s"[^,]*, //; s/, "data_wait_s"[^,]*//' "$1"; } # loss, lr, grad norm per step
  "$pdonnx" train "$ex/digits_mlp.onnx" --steps 60 --metrics "$tmp/whole.jsonl" --quiet >/dev/null 2>&1
  "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x-*.npy" --labels "$tmp/y-*.npy" --steps 60 \
    --checkpoint-dir "$tmp/shck" --checkpoint-every 20 --metrics "$tmp/shards.jsonl" --quiet >/dev/null 2>&1
  rm -rf "$tmp/shck/ckpt-000000000040" "$tmp/shck/ckpt-000000000060"
  "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x-*.npy" --labels "$tmp/y-*.npy" --steps 60 --resume "$tmp/shck" \
    --metrics "$tmp/resumed.jsonl" >"$tmp/resumed" 2>&1
  if [ "$(wc -l <"$tmp/whole.jsonl")" -eq 60 ] && [ "$(lossgrad "$tmp/shards.jsonl")" = "$(lossgrad "$tmp/whole.jsonl")" ] &&
     grep -q "at step 20" "$tmp/resumed" && [ "$(lossgrad "$tmp/resumed.jsonl" | tail -40)" = "$(lossgrad "$tmp/whole.jsonl" | tail -40)" ]; then
    ok "train on 3 shards gives the whole file's 60 losses and gradient norms, and so does a resume from step 20"
  else
    bad "shards: $(diff <(lossgrad "$tmp/whole.jsonl") <(lossgrad "$tmp/shards.jsonl") | head -3) / $(tail -2 "$tmp/resumed")"
  fi
  expect_error "train: shards that match no file" "nope-*.npy: no file matches" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/nope-*.npy" --labels "$tmp/y-*.npy" --quiet
  expect_error "train: as many data as label shards" "names 3 files but --labels" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x-*.npy" --labels "$d/train_y.npy" --quiet
  cp "$tmp/x-a.npy" "$tmp/m-a.npy" && "$npytool" cast "$tmp/x-b.npy" "$tmp/m-b.npy" float64
  expect_error "train: a shard whose rows differ from the first's" "m-b.npy: rows of float64 [64], not the float32 [64] of" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/m-*.npy" --labels "$tmp/y-*.npy" --quiet
  "$npytool" set "$d/train_x.npy" "$tmp/x_nan.npy" 5 nan
  expect_error "train: NaN loss names the step and the first non-finite tensor" \
    "step 1: the loss is nan; the first non-finite tensor is '/fc1/Gemm_output_0'" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --data "$tmp/x_nan.npy" --no-shuffle --save "$tmp/nan.onnx" --quiet
  if [ ! -e "$tmp/nan.onnx" ] && [ -z "$(ls "$tmp" | grep 'nan.onnx.tmp')" ]; then
    ok "train: a failed run leaves no model and no temporary file"
  else
    bad "train: a failed run left files: $(ls "$tmp")"
  fi
fi
expect_error "train: unwritable --save" "--save /nonexistent-dir/m.onnx: folder /nonexistent-dir: No such file" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --save /nonexistent-dir/m.onnx --quiet
expect_error "train: bad --optimizer" "--optimizer must be one of sgd|momentum|nesterov|adam|adamw" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --optimizer lbfgs
expect_error "train: bad --lr" "--lr expects a number" "$pdonnx" train "$ex/digits_mlp.onnx" --lr fast

# --- profiles, plans, schedules, simulation
if "$pdonnx" profile "$fx/mlp/model.onnx" --batch 16 --warmup 1 --repeats 2 -o "$tmp/prof.json" --quiet >"$tmp/out" 2>&1 \
   && grep -q '"format": *"pdonnx-profile"' "$tmp/prof.json" \
   && "$pdonnx" plan --profile "$tmp/prof.json" --workers 2 -o "$tmp/plan.json" >"$tmp/out" 2>&1 \
   && grep -q "predicted time per minibatch" "$tmp/out" && grep -q '"predicted_speedup"' "$tmp/plan.json" \
   && "$pdonnx" simulate "$tmp/plan.json" --schedule flush --microbatches 4 --trace "$tmp/trace.json" >"$tmp/out" 2>&1 \
   && grep -q "bubble:" "$tmp/out" && grep -q '"ph":"X"' "$tmp/trace.json"; then
  ok "profile -> plan -> simulate on the mlp fixture"
else
  bad "profile -> plan -> simulate: $(head -c 600 "$tmp/out")"
fi
if "$pdonnx" plan --profile "$tmp/prof.json" --workers 2 --algo uniform --json - >"$tmp/out" 2>"$tmp/err" \
   && grep -q '"stages"' "$tmp/out" && grep -q '"predicted_speedup"' "$tmp/out" && [ ! -s "$tmp/err" ] \
   && ! grep -q "predicted time per minibatch" "$tmp/out"; then
  ok "plan --json - prints the plan as JSON alone"
else
  bad "plan --json -: $(head -c 300 "$tmp/out") $(head -c 300 "$tmp/err")"
fi
if "$pdonnx" schedule --stages 3 --microbatches 4 --schedule flush >"$tmp/out" 2>&1 \
   && grep -qx "stage 0: F0 F1 F2 B0 F3 B1 B2 B3 STEP" "$tmp/out" \
   && grep -qx "stage 2: F0 B0 F1 B1 F2 B2 F3 B3 STEP" "$tmp/out"; then
  ok "schedule prints 1F1B's instruction lists"
else
  bad "schedule: $(cat "$tmp/out")"
fi
printf 'node1 -- Conv2d -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=10.0, parameter_size=5.0\nnode2 -- ReLU -- forward_compute_time=abc, backward_compute_time=1.0, activation_size=10.0, parameter_size=0.0\n' >"$tmp/bad.txt"
expect_error "plan: malformed PipeDream profile" "$tmp/bad.txt:2:" "$pdonnx" plan --profile "$tmp/bad.txt" --workers 2
expect_error "plan: missing --workers" "missing --workers" "$pdonnx" plan --profile "$tmp/prof.json"
expect_error "plan: impossible memory" "raise --memory" "$pdonnx" plan --profile "$tmp/prof.json" --workers 2 --memory 1k
expect_error "plan: more stages than nodes" "set --workers to" "$pdonnx" plan --profile "$tmp/prof.json" --workers 500 --algo uniform
expect_error "plan: topology and bandwidths disagree" "one value per --topology level" \
  "$pdonnx" plan --profile "$tmp/prof.json" --topology 2x2 --bandwidth 1e9
expect_error "simulate: unknown schedule" "gpipe" "$pdonnx" simulate "$tmp/plan.json" --schedule sideways
expect_error "simulate: missing plan file" "$tmp/nope.json" "$pdonnx" simulate "$tmp/nope.json" --schedule flush
echo '{"format": "pdonnx-plan", "workers": 1' >"$tmp/trunc.json"
expect_error "simulate: truncated plan" "$tmp/trunc.json:1: invalid JSON" "$pdonnx" simulate "$tmp/trunc.json" --schedule flush
# per-call costs (docs/PROFILE.md): a chain whose every time is call + row * b, profiled at 8 rows,
# planned at 2: flush with 4 microbatches on 2 stages is 5 x 3 ms, linear scaling 5 x 2.25; one
# worker on the 8 rows at once is the profile's own 2 x 9 ms, 4 x 6 ms less 3 extra calls of 2 ms
cat >"$tmp/call.json" <<'EOF'
{"format": "pdonnx-profile", "version": 1, "batch": 8, "fit_batches": [2], "nodes": [
 {"name":"n0","desc":"Gemm","fwd_ms":2.5,"bwd_in_ms":4.5,"bwd_w_ms":2,"param_bytes":1024,"fwd_call_ms":0.5,"bwd_in_call_ms":0.5},
 {"name":"n1","desc":"Gemm","fwd_ms":2.5,"bwd_in_ms":4.5,"bwd_w_ms":2,"param_bytes":1024,"fwd_call_ms":0.5,"bwd_in_call_ms":0.5}],
 "edges": [["n0","n1"]]}
EOF
if "$pdonnx" plan --profile "$tmp/call.json" --workers 2 --straight --bandwidth 1e18 --microbatches 4 \
     --microbatch-size 2 -o "$tmp/call_plan.json" >"$tmp/out" 2>&1 \
   && grep -q "microbatches of 2 rows: the profile's times at 8 rows scaled with its per-call costs" "$tmp/out" \
   && "$pdonnx" simulate "$tmp/call_plan.json" --schedule flush >"$tmp/out" 2>&1 \
   && grep -q "^time per minibatch: 15.000 ms" "$tmp/out" \
   && grep -Eq "^ +0 +3.000 +2.250 +1.000 +\+33.3%" "$tmp/out" \
   && grep -q "linear scaling would predict 11.250 ms per minibatch (711.1 samples/s); the per-call costs make it 1.33x" "$tmp/out" \
   && grep -q "^one worker on all 8 rows at once: 18.000 ms (the pipeline 1.20x as fast)" "$tmp/out" \
   && grep -q "^microbatches: 4 calls of 2 rows per node where one worker makes one of 8: the extra calls cost 6 ms a step, 33.3% of one worker's" "$tmp/out" \
   && "$pdonnx" simulate "$tmp/plan.json" --schedule flush >"$tmp/out2" 2>&1 && ! grep -q "overhead" "$tmp/out2"; then
  ok "plan --microbatch-size 2 from a profile at 8 with per-call costs: simulate shows 15 ms against linear 11.25, one worker 18"
else
  bad "per-call costs: $(head -c 900 "$tmp/out")"
fi
# the same chain as 2bw on 4 workers: 4 parallel pipelines, so one worker runs 4 x 4 microbatches' 32 rows at
# once, 16 x 6 ms less 15 extra calls of 2 ms = 66 ms, the planner's single_ms, against 24 ms a minibatch
if "$pdonnx" plan --profile "$tmp/call.json" --workers 4 --algo 2bw --bandwidth 1e18 --microbatches 4 \
     --microbatch-size 2 -o "$tmp/call_2bw.json" >"$tmp/out" 2>&1 && grep -Eq '"width":[[:space:]]*4,' "$tmp/call_2bw.json" \
   && grep -Eq '"single_ms":[[:space:]]*66,' "$tmp/call_2bw.json" \
   && "$pdonnx" simulate "$tmp/call_2bw.json" --schedule 2bw >"$tmp/out" 2>&1 \
   && grep -q "^time per minibatch: 24.000 ms" "$tmp/out" \
   && grep -q "^one worker on all 32 rows at once: 66.000 ms (the pipeline 2.75x as fast)" "$tmp/out" \
   && grep -q "^microbatches: 16 calls of 2 rows per node where one worker makes one of 32: the extra calls cost 30 ms a step, 45.5% of one worker's" "$tmp/out"; then
  ok "simulate, 4 parallel pipelines with per-call costs: one worker on all 32 rows, 66 ms as the planner's single_ms"
else
  bad "per-call costs, 2bw width 4: $(head -c 900 "$tmp/out")"
fi
if "$pdonnx" profile "$fx/mlp/model.onnx" --batch 16 --fit-batches 4 --warmup 1 --repeats 2 -o "$tmp/fit.json" >"$tmp/out" 2>&1 \
   && grep -q "per-call costs fitted from batches 16, 4" "$tmp/out" && grep -q '"fit_batches": \[4\]' "$tmp/fit.json" \
   && "$pdonnx" plan --profile "$tmp/fit.json" --workers 2 --microbatch-size 4 -o "$tmp/fit_plan.json" >/dev/null 2>&1 \
   && grep -q '"profile_batch":' "$tmp/fit_plan.json"; then
  ok "profile --fit-batches 4 at batch 16 writes fit_batches; plan --microbatch-size 4 reads it"
else
  bad "profile --fit-batches: $(head -c 600 "$tmp/out")"
fi
expect_error "profile: bad --fit-batches" "--fit-batches: '4,x'" \
  "$pdonnx" profile "$fx/mlp/model.onnx" --batch 16 --fit-batches 4,x -o "$tmp/p.json"
printf 'node1 -- Linear -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=10.0, parameter_size=5.0\n' >"$tmp/pd1.txt"
expect_error "plan: --microbatch-size on a profile without a batch" "plan: --microbatch-size: the profile does not say its batch" \
  "$pdonnx" plan --profile "$tmp/pd1.txt" --workers 1 --microbatch-size 2
expect_error "schedule: interleaved needs m divisible by p" "multiple" \
  "$pdonnx" schedule --stages 3 --microbatches 4 --schedule interleaved
# --- CUDA (docs/CUDA.md; the runs themselves are test_cli_cuda.sh, suite cuda): without a GPU, or
# in a build without the backend, --device cuda is one line saying which and a non-zero exit
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device cuda --quiet >/dev/null 2>&1; then
  ok "train --device cuda: a GPU is here (test_cli_cuda.sh checks the run)"
else
  expect_error "train --device cuda without a GPU or the CUDA backend" "device cuda: " \
    "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device cuda --quiet
  expect_error "profile --device cuda without a GPU or the CUDA backend" "device cuda: " \
    "$pdonnx" profile "$fx/mlp/model.onnx" --batch 4 --device cuda -o "$tmp/p.json"
  expect_error "train --device cuda --stages 2 without a GPU or the CUDA backend" "device cuda: " \
    "$pdonnx" train "$ex/digits_mlp.onnx" --steps 2 --stages 2 --device cuda --quiet
fi
# the CUDA module (libpdcuda.so) missing: one line naming the file that did not load (a build
# without the backend says that instead)
expect_error "train --device cuda with PDONNX_CUDA_MODULE naming no file" "device cuda: " \
  env PDONNX_CUDA_MODULE="$tmp/none/libpdcuda.so" "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device cuda --quiet
if ! grep -qF -e "cannot load the CUDA module $tmp/none/libpdcuda.so: " -e "no CUDA backend" "$tmp/err"; then
  bad "train --device cuda, module missing: the line names neither the module nor a build without it: $(cat "$tmp/err")"
fi
expect_error "train: bad --device" "device must be cpu, cuda, cuda:N, sim or sim:N, not 'tpu'" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --device tpu
expect_error "train: bad --precision" "precision must be fp32, tf32 or bf16, not 'fp8'" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --precision fp8
expect_error "profile: bad --device" "--device: device must be cpu, cuda, cuda:N, sim or sim:N, not 'gpu'" \
  "$pdonnx" profile "$fx/mlp/model.onnx" --batch 4 --device gpu -o "$tmp/p.json"

same_losses() { # same_losses A.jsonl B.jsonl: per-step losses equal to 1e-5 relative
  [ "$(wc -l <"$1")" -eq "$(wc -l <"$2")" ] &&
  paste -d' ' <(grep -o '"loss": [^,]*' "$1" | cut -d' ' -f2) <(grep -o '"loss": [^,]*' "$2" | cut -d' ' -f2) |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 > 0 ? $1 : -$1) + 1e-7) bad = 1} END {exit bad}'
}

# --- the simulated device (--device sim[:N], a CUDA build): the device path on the CPU, one stage and a
# pipeline of 2 stages on 2 simulated devices, against the CPU's losses; bad counts refused in one line
simargs=(--steps 20 --no-shuffle --optimizer momentum --lr 0.05 --quiet)
sim_vs_cpu() { # sim_vs_cpu DEVICE FLAGS...: the run on DEVICE gives the CPU run's 20 losses
  local dev=$1
  shift
  "$pdonnx" train "$ex/digits_mlp.onnx" "${simargs[@]}" "$@" --metrics "$tmp/simcpu.jsonl" >/dev/null 2>&1
  if "$pdonnx" train "$ex/digits_mlp.onnx" "${simargs[@]}" "$@" --device "$dev" --metrics "$tmp/sim.jsonl" \
       >"$tmp/out" 2>&1 && [ "$(wc -l <"$tmp/sim.jsonl")" -eq 20 ] && same_losses "$tmp/simcpu.jsonl" "$tmp/sim.jsonl"; then
    ok "train --device $dev${*:+ $*}: 20 losses equal the CPU's"
  else
    bad "train --device $dev${*:+ $*}: $(tail -c 300 "$tmp/out")"
  fi
}
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device sim --quiet >"$tmp/out" 2>&1; then
  sim_vs_cpu sim
  sim_vs_cpu sim:2 --stages 2 --schedule 2bw --microbatches 2
  expect_error "train --device sim:9" "device sim:9: from 1 to 8 simulated devices" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device sim:9 --quiet
  expect_error "train --device sim:0" "not 'sim:0'" "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device sim:0 --quiet
else
  expect_error "train --device sim without the CUDA backend" "no CUDA backend" \
    "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device sim --quiet
fi

# --- pipeline training: 1F1B over 2 stages equals one stage on the same global batch
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 20 --no-shuffle --metrics "$tmp/one.jsonl" --quiet >"$tmp/out" 2>&1 \
   && "$pdonnx" train "$ex/digits_mlp.onnx" --steps 20 --no-shuffle --stages 2 --schedule flush --microbatches 4 \
        --metrics "$tmp/pipe.jsonl" --trace "$tmp/ptrace.json" --save "$tmp/pipe.onnx" >"$tmp/out" 2>&1 \
   && [ "$(wc -l <"$tmp/pipe.jsonl")" -eq 20 ] && grep -q '"ph":"X"' "$tmp/ptrace.json" && [ -s "$tmp/pipe.onnx" ] \
   && grep -q "simulated" "$tmp/out" && same_losses "$tmp/one.jsonl" "$tmp/pipe.jsonl"; then
  ok "train --stages 2 --schedule flush: 20 losses equal one stage's, trace and model written"
else
  bad "train pipeline: $(tail -c 800 "$tmp/out")"
fi
for s in gpipe zb-h1 interleaved avgpipe; do
  if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 20 --no-shuffle --stages 2 --schedule "$s" \
       --metrics "$tmp/p_$s.jsonl" --quiet >"$tmp/out" 2>&1 && same_losses "$tmp/one.jsonl" "$tmp/p_$s.jsonl"; then
    ok "train --stages 2 --schedule $s: 20 losses equal one stage's"
  else
    bad "train --schedule $s: $(tail -c 400 "$tmp/out")"
  fi
done
# the run summary's bubble: measured and simulated over the whole run (fill
# and drain included: 4 minibatches), beside the simulator's steady state,
# which leaves them out and so is lower
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 4 --no-shuffle --stages 2 --schedule pipedream >"$tmp/out" 2>&1 \
   && b=$(grep -o 'bubble: [0-9.]*% measured, [0-9.]*% simulated ([0-9.]*% in the steady state)' "$tmp/out") \
   && awk -v b="$b" 'BEGIN { gsub(/[^0-9. ]/, " ", b); split(b, v, " "); exit !(v[2] > v[3]) }'; then
  ok "train --schedule pipedream: the run's simulated bubble above the steady state's ($b)"
else
  bad "train --schedule pipedream, the bubble line: $(grep bubble "$tmp/out" || tail -c 400 "$tmp/out")"
fi
# the run summary's step: with several microbatches the profile is also
# measured at the step's rows, so the plan holds each stage's per-call cost
# (0 to the stage's time), one worker's simulated time is M microbatches'
# less the M - 1 extra calls, and the summary's figures are the plan's
rm -rf "$tmp/ckfit"
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 4 --no-shuffle --stages 2 --schedule flush --microbatches 4 \
     --checkpoint-dir "$tmp/ckfit" --checkpoint-every 4 >"$tmp/out" 2>&1 \
   && s=$(grep -o 'ms measured, [0-9.e+-]* ms simulated; one worker on all 32 rows at once: [0-9.e+-]* ms simulated (the pipeline [0-9.]*x as fast)' "$tmp/out") \
   && m=$(grep -o '^microbatches: 4 calls of 8 rows per node where one worker makes one of 32: the extra calls cost [0-9.e+-]* ms a step, [0-9.]*% of one worker.s' "$tmp/out") \
   && python3 - "$tmp/ckfit"/ckpt-*/manifest.json "$s" "$m" <<'PY'
import json, re, sys
p = json.load(open(sys.argv[1]))["info"]["plan"]
num = lambda t: [float(x) for x in re.findall(r"\d[\d.]*(?:e[+-]?\d+)?", t)]
sim, one, speed = num(sys.argv[2])[0], num(sys.argv[2])[2], num(sys.argv[2])[3]
extra, share = num(sys.argv[3])[-2:]
M, parts, calls = p["microbatches"], ("fwd", "bwd_in", "bwd_w"), 0
for st in p["stages"]:
    for k in parts:
        assert 0 <= st[k + "_call_ms"] <= st[k + "_ms"], (k, st)
        calls += st[k + "_call_ms"]
total = sum(st[k + "_ms"] for st in p["stages"] for k in parts)
assert calls > 0 and M == 4
close = lambda a, b, rel: abs(a - b) <= rel * abs(b)
assert close(p["single_ms"], M * total - (M - 1) * calls, 1e-6), p["single_ms"]
assert close(one, p["single_ms"], 0.006) and close(speed, one / sim, 0.02), (one, sim, speed)
assert close(extra, (M - 1) * calls, 0.006) and abs(share - 100 * (M - 1) * calls / p["single_ms"]) < 0.051, (extra, share)
PY
then
  ok "train --microbatches 4: per-call costs fitted at the step's rows, one worker's time and the extra calls' cost ($(grep -o 'extra calls cost .*' "$tmp/out"))"
else
  bad "train --microbatches 4, the step lines: $(grep -E '^(step|microbatches):' "$tmp/out" || tail -c 600 "$tmp/out")"
fi
# a model that loads at a microbatch's 8 rows and at no other (a constant
# Reshape): the fit at the step's 32 rows cannot load, a note names the node,
# and the run trains on without per-call costs
if "$pdonnx" train "$fx/fixed_rows/model.onnx" --data "$ex/digits/train_x.npy" --labels "$ex/digits/train_y.npy" \
     --batch 32 --steps 3 --stages 2 --microbatches 4 >"$tmp/out" 2>&1 \
   && grep -q "^note: the plan's per-call costs were not measured at the step's 32 rows (.*node 'fixed_rows' (Reshape): cannot reshape \[32,64\] into \[8,64\])" "$tmp/out" \
   && grep -q "^trained 3 steps" "$tmp/out" && grep -q "^step: .* ms simulated$" "$tmp/out" && ! grep -q "^microbatches:" "$tmp/out"; then
  ok "train --microbatches 4 on a model fixed at 8 rows: the fit's load fails, a note, the run trains"
else
  bad "train, a fit that cannot load: $(head -c 600 "$tmp/out")"
fi
# one microbatch: the step line, no per-call costs to fit and nothing extra
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 4 --no-shuffle --stages 2 --schedule pipedream >"$tmp/out" 2>&1 \
   && grep -q '^step: .* ms measured, .* ms simulated; one worker on all 32 rows at once: .* ms simulated' "$tmp/out" \
   && ! grep -q '^microbatches:' "$tmp/out"; then
  ok "train --schedule pipedream: the step line without a microbatch overhead"
else
  bad "train --schedule pipedream, the step line: $(grep -E '^(step|microbatches):' "$tmp/out" || tail -c 400 "$tmp/out")"
fi
expect_error "train: --vertical-sync is PipeDream's" "--vertical-sync goes with --schedule pipedream" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --stages 2 --schedule flush --vertical-sync --quiet
expect_error "train: microbatches must divide the batch" "not a multiple of --microbatches 3" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --stages 2 --microbatches 3 --quiet
expect_error "train: pipedream takes one microbatch" "use --microbatches 1" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --stages 2 --schedule pipedream --microbatches 2 --quiet
expect_error "train: --schedule needs stages" "need --stages N or --plan FILE" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --schedule flush --quiet
first=$(grep -o '"nodes":[[:space:]]*\["[^"]*"' "$tmp/plan.json" | head -1 | sed 's/.*\["//; s/"$//')
sed "s|\"$first\"|\"renamed\"|g" "$tmp/plan.json" >"$tmp/other_plan.json"
expect_error "train: a plan for another model" "node 'renamed' is not in $ex/digits_mlp.onnx: plan this model" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --plan "$tmp/other_plan.json" --quiet

# --- AvgPipe: K parallel pipelines (tools/train_avgpipe.c)
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 20 --no-shuffle --stages 2 --schedule avgpipe --parallel-pipelines 1 \
     --average-every 0 --metrics "$tmp/avg1.jsonl" --quiet >"$tmp/out" 2>&1 && same_losses "$tmp/one.jsonl" "$tmp/avg1.jsonl"; then
  ok "train --parallel-pipelines 1 without averaging: 20 losses equal one stage's"
else
  bad "train --parallel-pipelines 1: $(tail -c 400 "$tmp/out")"
fi
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 20 --stages 2 --schedule avgpipe --parallel-pipelines 2 \
     --elastic-alpha 0.25 --average-every 4 --metrics "$tmp/avg2.jsonl" --save "$tmp/avg2.onnx" >"$tmp/out" 2>&1 &&
   grep -q "2 parallel pipelines of 2 stages" "$tmp/out" && grep -q "5 elastic updates" "$tmp/out" &&
   [ -s "$tmp/avg2.onnx" ] && [ "$(grep -c '"pipeline_loss": \[[^,]*, [^,]*\]' "$tmp/avg2.jsonl")" -eq 20 ]; then
  ok "train --parallel-pipelines 2: 5 elastic updates, both pipelines' losses per step, the centre saved"
else
  bad "train --parallel-pipelines 2: $(tail -c 600 "$tmp/out")"
fi
# the copies are loaded as the first pipeline's graph was: --untie (the
# GPT-2 export's LM head) gives every copy the same parameters
if (cd "$zoo/gpt2-ts" && "$pdonnx" train model.onnx --data X.npy --labels Y.npy --batch 4 --steps 4 --stages 2 \
      --schedule avgpipe --parallel-pipelines 2 --untie) >"$tmp/out" 2>&1 \
   && grep -q "^untied 1 initializer" "$tmp/out" && grep -q "^trained 4 steps x 2 pipelines" "$tmp/out"; then
  ok "train --parallel-pipelines 2 --untie: every pipeline's copy untied as the first"
else
  bad "train --parallel-pipelines 2 --untie: $(tail -c 400 "$tmp/out")"
fi
expect_error "train: --parallel-pipelines needs stages" "need --stages N or --plan FILE" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --parallel-pipelines 2 --quiet
expect_error "train: the elastic update must contract" "at most 1" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --stages 2 --parallel-pipelines 2 --elastic-alpha 0.7 --quiet
expect_error "train: parallel pipelines flush" "not 2bw" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --stages 2 --parallel-pipelines 2 --schedule 2bw --quiet
if "$pdonnx" schedule --stages 3 --microbatches 6 --schedule avgpipe --max-inflight 5 >"$tmp/out" 2>&1 &&
   grep -q "^stage 0: F0 F1 F2 F3 F4 B0 F5 B1 B2 B3 B4 B5 STEP$" "$tmp/out"; then
  ok "schedule --schedule avgpipe --max-inflight 5: four forwards ahead on stage 0"
else
  bad "schedule avgpipe: $(cat "$tmp/out")"
fi
if "$pdonnx" plan "$ex/digits_mlp.onnx" --batch 8 --workers 4 --algo avgpipe -o "$tmp/avg_plan.json" >"$tmp/out" 2>&1 &&
   grep -q '"parallel_pipelines"' "$tmp/avg_plan.json" && grep -q "^avgpipe: .* --parallel-pipelines" "$tmp/out" &&
   "$pdonnx" simulate "$tmp/avg_plan.json" --schedule avgpipe >"$tmp/out2" 2>&1 && grep -q "throughput:" "$tmp/out2"; then
  ok "plan --algo avgpipe records K in the plan, prints the train command; simulate runs it"
else
  bad "plan --algo avgpipe: $(tail -c 600 "$tmp/out") $(tail -c 300 "$tmp/out2" 2>/dev/null)"
fi

# a plan's stage_to_rank: a stage's replicas on consecutive ranks, never two
# on one; stages may share a rank (several stages per process), a replica
# of a replicated stage among them (one process: the ranks do not matter)
# (by parameter counts: a split from measured times moves between runs, and the
# recompute check below counts stage 0's activations)
"$pdonnx" plan "$ex/digits_mlp.onnx" --batch 8 --workers 2 --straight --algo params -o "$tmp/rk.json" > /dev/null 2>&1
python3 - "$tmp/rk.json" "$tmp/rk_shared.json" "$tmp/rk_twice.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["replicas"] = 2
p["stages"][0]["ranks"] = [0, 1]
p["stages"][1]["ranks"] = [1]
p["workers"] = 3
json.dump(p, open(sys.argv[2], "w"))
p["stages"][0]["ranks"] = [1, 1]
json.dump(p, open(sys.argv[3], "w"))
PY
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 2 --plan "$tmp/rk_shared.json" --quiet > "$tmp/out" 2>&1; then
  ok "a plan whose replicated stage shares a rank with another stage trains"
else
  bad "a replicated stage sharing a rank: $(tail -c 400 "$tmp/out")"
fi
expect_error "two replicas of a stage on one rank" "stage 0's replicas 0 and 1 are both on rank 1 (a stage's replicas each need a process of their own)" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --steps 2 --plan "$tmp/rk_twice.json"

# activation recomputation: --recompute, or the plan's "recompute": true, trains the same model bit for
# bit; stage 0 (it receives nothing) then holds one microbatch's activations instead of its peak's two
peak0() { awk '$1 == "0" && $6 == "mb," { print $5, $7 }' "$1"; }
sed 's/"recompute":[[:space:]]*false/"recompute": true/' "$tmp/rk.json" > "$tmp/rk_rc.json"
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 10 --no-shuffle --plan "$tmp/rk.json" --microbatches 4 \
     --save "$tmp/rc0.onnx" >"$tmp/rc0.out" 2>&1 \
   && "$pdonnx" train "$ex/digits_mlp.onnx" --steps 10 --no-shuffle --plan "$tmp/rk.json" --microbatches 4 --recompute \
     --save "$tmp/rc1.onnx" >"$tmp/rc1.out" 2>&1 \
   && "$pdonnx" train "$ex/digits_mlp.onnx" --steps 10 --no-shuffle --plan "$tmp/rk_rc.json" --microbatches 4 \
     --save "$tmp/rc2.onnx" >"$tmp/rc2.out" 2>&1 \
   && cmp -s "$tmp/rc0.onnx" "$tmp/rc1.onnx" && cmp -s "$tmp/rc0.onnx" "$tmp/rc2.onnx" \
   && grep -q "activations recomputed" "$tmp/rc1.out" && grep -q "activations recomputed" "$tmp/rc2.out" \
   && ! grep -q "activations recomputed" "$tmp/rc0.out" && grep -q "^recomputation: [1-9][0-9]* forwards run again" "$tmp/rc1.out" \
   && awk -v a="$(peak0 "$tmp/rc0.out")" -v b="$(peak0 "$tmp/rc1.out")" \
        'BEGIN { split(a, x, " "); split(b, y, " "); exit !(x[1] == 2 && y[1] == 2 && y[2] * 2 == x[2]) }'; then
  ok "train --recompute and a plan's \"recompute\": true: the same model bit for bit, stage 0's peak activations halved"
else
  bad "train --recompute: $(tail -c 600 "$tmp/rc1.out") / $(peak0 "$tmp/rc0.out") vs $(peak0 "$tmp/rc1.out")"
fi
# the simulator's memory model: stage 0 holds one microbatch's activations instead of 1F1B's two
simpeak0() { awk '$1 == "0" && $2 == "1" { print $5, $6 }' "$1"; }
if "$pdonnx" simulate "$tmp/rk.json" --schedule flush --microbatches 4 >"$tmp/sim0.out" 2>&1 \
   && "$pdonnx" simulate "$tmp/rk.json" --schedule flush --microbatches 4 --recompute >"$tmp/sim1.out" 2>&1 \
   && grep -q "activations recomputed" "$tmp/sim1.out" \
   && awk -v a="$(simpeak0 "$tmp/sim0.out")" -v b="$(simpeak0 "$tmp/sim1.out")" \
        'BEGIN { split(a, x, " "); split(b, y, " "); exit !(x[1] == y[1] && y[2] * 2 == x[2]) }'; then
  ok "simulate --recompute: stage 0's simulated peak activations halved ($(simpeak0 "$tmp/sim0.out") -> $(simpeak0 "$tmp/sim1.out"))"
else
  bad "simulate --recompute: $(simpeak0 "$tmp/sim0.out") vs $(simpeak0 "$tmp/sim1.out"): $(head -c 400 "$tmp/sim1.out")"
fi
expect_error "train: --recompute needs a pipeline" "need --stages N or --plan FILE" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --recompute --quiet

# a hybrid plan under pipedream: stage 1 on two replicas, which take the microbatches in turn
# (replica 0 the even ones, replica 1 the odd) and update once per round of two
sed -z 's/"replicas":[[:space:]]*1,\([[:space:]]*\)"ranks":[[:space:]]*\[1\]/"replicas": 2,\1"ranks": [1, 2]/' "$tmp/rk.json" \
  > "$tmp/rk_rep.json"
b_of() { grep '"cat":"B"' "$tmp/rep.json" | grep "\"tid\":$1," | grep -o '"name":"B[0-9]*"' | tr -dc '0-9\n' |
  awk '{ n++; odd += $1 % 2 } END { print n + 0, odd + 0 }'; }
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 40 --plan "$tmp/rk_rep.json" --schedule pipedream --microbatches 1 \
     --trace "$tmp/rep.json" --quiet >"$tmp/out" 2>&1 && [ "$(b_of 1)" = "20 0" ] && [ "$(b_of 2)" = "20 20" ] &&
   [ "$(grep '"cat":"STEP"' "$tmp/rep.json" | grep -c '"tid":2,')" -eq 20 ]; then
  ok "train --plan (stage 1 replicated) --schedule pipedream: each replica 20 backwards (even, odd), 20 updates"
else
  bad "train a replicated plan under pipedream: $(tail -c 400 "$tmp/out") replica 0: $(b_of 1), replica 1: $(b_of 2)"
fi
expect_error "pipedream with a replicated stage: no vertical sync" "stage 1 is replicated" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --steps 2 --plan "$tmp/rk_rep.json" --schedule pipedream --vertical-sync --quiet
expect_error "pipedream with a replicated stage: no checkpoints yet" "checkpoints of a pipedream run with a replicated stage" \
  "$pdonnx" train "$ex/digits_mlp.onnx" --steps 4 --plan "$tmp/rk_rep.json" --schedule pipedream \
  --checkpoint-dir "$tmp/rep_ck" --checkpoint-every 2 --quiet

echo "$fails failed"
[ "$fails" -eq 0 ]
