#!/usr/bin/env bash
# test_hostile_out.sh - what pdonnx writes, and the data it trains on, when
# the files around it are hostile or the disk fails (issue 22): outputs that
# are devices, FIFOs or folders are refused before anything is trained; a
# failed write ends the run with one line and a non-zero exit; a model's
# .flags file cannot choose a path to write; zero-row data is refused at start.
#   test_hostile_out.sh PDONNX SOURCE_DIR NPYTOOL
set -u
pdonnx=$1 src=$2 npytool=$3
. "$src/tests/common.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

# refusals may follow start-up lines, never training (tests/common.sh)
ERR_STDOUT=quiet-run

# a model with its data and no .flags beside it
m=$tmp/m
mkdir -p "$m"
cp "$src/examples/digits_mlp.onnx" "$m/model.onnx"
X=$src/examples/digits/train_x.npy Y=$src/examples/digits/train_y.npy
train=("$pdonnx" train "$m/model.onnx" --data "$X" --labels "$Y" --steps 3 --quiet)
loud=("$pdonnx" train "$m/model.onnx" --data "$X" --labels "$Y" --steps 3) # prints "training ..." once it trains

# --- D5: outputs that are not regular files are refused, never replaced
mkfifo "$tmp/fifo"
expect_error "--save onto a FIFO" "fifo: not a regular file" "${train[@]}" --save "$tmp/fifo"
expect_error "--metrics onto a FIFO" "fifo: not a regular file" "${train[@]}" --metrics "$tmp/fifo"
expect_error "--metrics onto a device" "/dev/full: not a regular file" "${train[@]}" --metrics /dev/full
expect_error "--trace onto a FIFO" "--trace $tmp/fifo: not a regular file" "${train[@]}" --stages 2 --trace "$tmp/fifo"
expect_error "run --output onto a FIFO" "fifo: not a regular file" \
  "$pdonnx" run "$src/tests/fixtures/mlp/model.onnx" --input x="$src/tests/fixtures/mlp/x.npy" --output y="$tmp/fifo"
"${train[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 3 >/dev/null 2>&1 || bad "a checkpoint to export"
expect_error "export -o onto a FIFO" "fifo: not a regular file" "$pdonnx" export "$tmp/ck" -o "$tmp/fifo" --model "$m/model.onnx"
[ -p "$tmp/fifo" ] && ok "the FIFO is still a FIFO" || bad "the FIFO was replaced: $(ls -l "$tmp/fifo")"

# --- D16: --save's destination is checked before training
mkdir "$tmp/dir"
expect_error "--save onto a folder" "--save $tmp/dir: is a folder" "${loud[@]}" --save "$tmp/dir"
expect_error "--save ending in /" "names a folder, not a file" "${loud[@]}" --save "$tmp/new/"
expect_error "--save into a missing folder" "--save $tmp/none/out.onnx: folder $tmp/none" "${loud[@]}" --save "$tmp/none/out.onnx"
[ ! -e "$tmp/new" ] && ok "nothing made at the refused --save path" || bad "$tmp/new was made"

# --- D6: a write error on --metrics ends the run (a disk that fills: RLIMIT_FSIZE of 8 KiB, SIGXFSZ ignored)
for how in "one stage:" "two stages:--stages 2"; do
  rm -f "$tmp/m.jsonl"
  extra=${how#*:}
  # shellcheck disable=SC2086
  (ulimit -f 8; trap '' XFSZ; exec "$pdonnx" train "$m/model.onnx" --data "$X" --labels "$Y" --steps 400 --quiet \
     --metrics "$tmp/m.jsonl" $extra) >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^pdonnx: --metrics $tmp/m.jsonl: write failed: File too large" "$tmp/err"; then
    ok "full disk under --metrics (${how%%:*}) ends the run: $(cat "$tmp/err")"
  else
    bad "full disk under --metrics (${how%%:*}): rc=$rc: $(head -c 300 "$tmp/err")"
  fi
done

# --- D8: zero-row data refused at start, naming the file
"$npytool" head "$X" "$tmp/x0.npy" 0 && "$npytool" head "$Y" "$tmp/y0.npy" 0 || bad "npytool head 0"
expect_error "zero-row --data" "x0.npy: no rows" "$pdonnx" train "$m/model.onnx" --data "$tmp/x0.npy" --labels "$tmp/y0.npy" --steps 3
expect_error "zero-row --data, pipelined" "x0.npy: no rows" \
  "$pdonnx" train "$m/model.onnx" --data "$tmp/x0.npy" --labels "$tmp/y0.npy" --steps 3 --stages 2
expect_error "zero-row --val" "x0.npy: no rows" "${train[@]}" --val "$tmp/x0.npy" "$tmp/y0.npy" --save "$tmp/s.onnx"
[ ! -e "$tmp/s.onnx" ] && ok "nothing saved after a refused --val" || bad "saved after a refused --val"

# --- D10: a .flags file sets training settings only, never a path written to
for flag in "--save $tmp/victim" "--metrics $tmp/victim" "--trace $tmp/victim" "--checkpoint-dir $tmp/vdir" \
            "--resume $tmp/vdir"; do
  printf -- '--data %s --labels %s\n--steps 2 %s\n' "$X" "$Y" "$flag" >"$m/model.flags"
  expect_error "a .flags file with ${flag%% *}" "model.flags: ${flag%% *} names a file pdonnx writes" \
    "$pdonnx" train "$m/model.onnx" --quiet
done
[ ! -e "$tmp/victim" ] && [ ! -e "$tmp/vdir" ] && ok "nothing written where .flags pointed" || bad "a .flags path was written"
printf -- '--data %s --labels %s\n--steps 2 --lr 0.05 --optimizer momentum\n' "$X" "$Y" >"$m/model.flags"
if "$pdonnx" train "$m/model.onnx" --save "$tmp/ok.onnx" >"$tmp/out" 2>&1 && [ -s "$tmp/ok.onnx" ] \
   && grep -q "momentum lr 0.05" "$tmp/out"; then
  ok "a .flags file still sets training settings"
else
  bad "a .flags file with training settings: $(head -c 300 "$tmp/out")"
fi
rm -f "$m/model.flags"

echo "$fails failed"
[ "$fails" -eq 0 ]
