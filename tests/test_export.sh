#!/usr/bin/env bash
# test_export.sh PDONNX GEN_MLP PEAKRSS INITCMP - `pdonnx export` streams
# (docs/CHECKPOINT.md, "Export streams"): on a 67 MB MLP whose weights are
# external data (gen_mlp, made here), trained as 2 stages with momentum (each
# part holds half the weights and their momentum), the export's peak resident
# memory (about 28 MB: code, graph, a chunk and the frozen layer's copy; 65
# under ASan) is under 60% of the whole-model export's (202 MB; 359 under
# ASan), measured here (PDONNX_LAZY_WEIGHTS=0, how export worked before: the
# model and every part in memory at once), and the model it writes (a small
# OUT.onnx and OUT.onnx.data) holds the same initializers bit for bit as the
# self-contained one (byte for byte what --save wrote, checked on a smaller
# model without frozen layers). A frozen layer (in no part) is copied from
# the model's file; a transposed tie is followed. Refusals: a missing part, a
# truncated one, a part of another plan and a checkpoint of another model,
# each one line naming the file, with nothing left at the output's paths.
# With mpirun (and an MPI build): a checkpoint written by 2 processes, each
# holding its stage only, exports to the one-process run's tensors.
set -u
pdonnx=$1
gen_mlp=$2
peakrss=$3
initcmp=$4
. "$(dirname "$0")/common.sh"

big=$tmp/big
mkdir -p "$big" && "$gen_mlp" "$big" 4 2048 64 || { bad "gen_mlp"; exit 1; }
train=("$big/mlp.onnx" --data "$big/x.npy" --labels "$big/y.npy" --batch 8 --microbatches 2 --optimizer momentum
       --freeze '^fc0\.' --quiet)
"$pdonnx" train "${train[@]}" --steps 2 --stages 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 \
  > "$tmp/log" 2>&1 || { bad "the training run: $(tail -2 "$tmp/log")"; exit 1; }
ck=$tmp/ck/ckpt-000000000002
mkdir -p "$tmp/exp"
"$peakrss" "$tmp/new" "$pdonnx" export "$tmp/ck" -o "$tmp/exp/new.onnx" > "$tmp/log" 2>&1
rc1=$?
PDONNX_LAZY_WEIGHTS=0 "$peakrss" "$tmp/old" "$pdonnx" export "$tmp/ck" -o "$tmp/old.onnx" > "$tmp/log0" 2>&1
rc0=$?
new=$(cat "$tmp/new.0" 2>/dev/null || echo 0) old=$(cat "$tmp/old.0" 2>/dev/null || echo 0)
parts=$(( ($(wc -c < "$ck/part-0.bin") + $(wc -c < "$ck/part-1.bin")) / 1024 ))
if [ $rc1 = 0 ] && [ $rc0 = 0 ] && [ "$new" -gt 0 ] && [ $((new * 100)) -lt $((old * 60)) ]; then
  ok "export streams: peak $((new / 1024)) MB against $((old / 1024)) MB for the whole model and parts ($((parts / 1024)) MB of parts)"
else
  bad "export peaks: rc $rc1/$rc0, $new KB against $old KB: $(tail -2 "$tmp/log")"
fi
msize=$(wc -c < "$tmp/exp/new.onnx" 2>/dev/null || echo 0)
if "$initcmp" "$tmp/old.onnx" "$tmp/exp/new.onnx" > "$tmp/cmp" &&
   [ "$msize" -lt 100000 ] && [ -s "$tmp/exp/new.onnx.data" ] && grep -q "new.onnx.data" "$tmp/log" &&
   [ "$(ls "$tmp/exp" | wc -l)" = 2 ]; then
  ok "export streams: the same tensors as the whole-model export ($(cat "$tmp/cmp")), a $msize-byte model and its data file"
else
  bad "export streams: another model: $(cat "$tmp/cmp" 2>/dev/null) $(tail -2 "$tmp/log")"
fi
# the frozen layer was in no part: copied from mlp.bin (and training changed the others)
if ! cmp -s "$big/mlp.onnx" "$tmp/exp/new.onnx" && ! "$initcmp" "$big/mlp.onnx" "$tmp/exp/new.onnx" > /dev/null; then
  ok "export streams: trained weights differ from the initial model's"
else
  bad "export streams: the exported model is the untrained one"
fi

# refusals, each on a copy of the checkpoint, with nothing left at the output's paths
small=$tmp/small
mkdir -p "$small" "$tmp/other" && "$gen_mlp" "$small" 3 256 64 && "$gen_mlp" "$tmp/other" 2 256 64 || { bad "gen_mlp small"; exit 1; }
strain=("$small/mlp.onnx" --data "$small/x.npy" --labels "$small/y.npy" --batch 8 --microbatches 2 --steps 2
        --checkpoint-every 2 --quiet)
# plans by parameter counts: stage 0 is fc0..relu1 of 2 stages and fc0..relu0 of 3 (plans from measured times
# could give both the same stage 0, whose part then fits either checkpoint)
for w in 2 3; do
  "$pdonnx" plan "$small/mlp.onnx" --batch 8 --workers $w --straight --algo params -o "$tmp/p$w.json" > /dev/null ||
    bad "the $w-stage plan"
done
"$pdonnx" train "${strain[@]}" --plan "$tmp/p2.json" --checkpoint-dir "$tmp/s2" --save "$tmp/s2.onnx" > /dev/null 2>&1 &&
  "$pdonnx" train "${strain[@]}" --plan "$tmp/p3.json" --checkpoint-dir "$tmp/s3" > /dev/null 2>&1 || bad "small runs"
mkdir -p "$tmp/o"
fresh() { rm -rf "$tmp/c"; cp -r "$tmp/s2/ckpt-000000000002" "$tmp/c"; }
nothing_left() {
  if [ -z "$(ls -A "$tmp/o")" ]; then ok "$1: nothing left at the output"; else bad "$1: left $(ls -A "$tmp/o")"; fi
}
fresh
rm "$tmp/c/part-1.bin"
expect_error "export: a missing part" "c/part-1.bin" "$pdonnx" export "$tmp/c" -o "$tmp/o/m.onnx"
nothing_left "a missing part"
fresh
truncate -s 1000 "$tmp/c/part-1.bin"
expect_error "export: a truncated part" "c/part-1.bin: 1000 bytes" "$pdonnx" export "$tmp/c" -o "$tmp/o/m.onnx"
nothing_left "a truncated part"
fresh
cp "$tmp/s3/ckpt-000000000002/part-0.bin" "$tmp/c/part-0.bin"
expect_error "export: a part of another plan" "c/part-0.bin" "$pdonnx" export "$tmp/c" -o "$tmp/o/m.onnx"
nothing_left "a part of another plan"
# another model: part 0's weights fit it (fc0, fc1 are written first), part 1's fc2 does not
fresh
expect_error "export: another model" "c/part-1.bin: 'fc2.weight' is not an initializer of that size" \
  "$pdonnx" export "$tmp/c" -o "$tmp/o/m.onnx" --model "$tmp/other/mlp.onnx"
nothing_left "another model"
# the data file's path taken by a folder: refused before anything is written
mkdir "$tmp/o/d.onnx.data"
expect_error "export: OUT.onnx.data is a folder" "d.onnx.data: is a folder" "$pdonnx" export "$tmp/s2" -o "$tmp/o/d.onnx"
if [ "$(ls -A "$tmp/o")" = d.onnx.data ]; then ok "a folder at OUT.onnx.data: nothing written"; else bad "left $(ls -A "$tmp/o")"; fi
rmdir "$tmp/o/d.onnx.data"
# and the good one still exports, equal to the whole-model way
if "$pdonnx" export "$tmp/s2" -o "$tmp/o/m.onnx" > /dev/null 2>&1 &&
   PDONNX_LAZY_WEIGHTS=0 "$pdonnx" export "$tmp/s2" -o "$tmp/m0.onnx" > /dev/null 2>&1 &&
   cmp -s "$tmp/s2.onnx" "$tmp/m0.onnx" && "$initcmp" "$tmp/m0.onnx" "$tmp/o/m.onnx" > /dev/null; then
  ok "export: the small model streamed equals the whole-model export, which is --save's model byte for byte"
else
  bad "export: the small model"
fi

# a tied head (fc1.weight stored as fc0.weight's transpose): the run, which read every weight, trained
# them as one tensor, so no part holds fc0.weight; the streamed export, whose lazy load cannot see the
# tie, finds it in the file and writes the trained fc1.weight's transpose, as the whole-model export does
mkdir -p "$tmp/tied" && "$gen_mlp" "$tmp/tied" 3 256 64 tied || bad "gen_mlp tied"
ttrain=("$tmp/tied/mlp.onnx" --data "$tmp/tied/x.npy" --labels "$tmp/tied/y.npy" --batch 8 --microbatches 2 --steps 2
        --checkpoint-every 2 --stages 2 --quiet)
rm -f "$tmp/o/"*
if "$pdonnx" train "${ttrain[@]}" --checkpoint-dir "$tmp/t2" > "$tmp/log" 2>&1 &&
   "$pdonnx" export "$tmp/t2" -o "$tmp/o/t.onnx" > "$tmp/log" 2>&1 &&
   PDONNX_LAZY_WEIGHTS=0 "$pdonnx" export "$tmp/t2" -o "$tmp/t0.onnx" > /dev/null 2>&1 &&
   "$initcmp" "$tmp/t0.onnx" "$tmp/o/t.onnx" > "$tmp/cmp" && grep -q "weights as external data" "$tmp/log" &&
   ! "$initcmp" "$tmp/tied/mlp.onnx" "$tmp/o/t.onnx" > /dev/null; then
  ok "export: a transposed tie the lazy load does not see is followed ($(cat "$tmp/cmp"))"
else
  bad "export: a transposed tie: $(cat "$tmp/cmp" 2>/dev/null) $(tail -2 "$tmp/log")"
fi

# the case export streams for: a checkpoint two processes wrote under mpirun, each reading and
# checkpointing only its stage (per-stage loading); exported, it equals the export of the same
# plan trained in one process (the same losses, so the same weights), tensor for tensor
if command -v mpirun > /dev/null; then
  mpi_setup
  "$pdonnx" plan "$small/mlp.onnx" --workers 2 --straight --algo uniform --batch 4 -o "$tmp/mp.json" > /dev/null 2>&1
  mtrain=("${strain[@]}" --plan "$tmp/mp.json" --optimizer adam)
  rm -f "$tmp/o/"*
  if mpi 2 "$pdonnx" train "${mtrain[@]}" --checkpoint-dir "$tmp/mck" > "$tmp/log" 2>&1; then
    "$pdonnx" train "${mtrain[@]}" --checkpoint-dir "$tmp/ock" > /dev/null 2>&1
    if "$pdonnx" export "$tmp/mck" -o "$tmp/o/mpi.onnx" > "$tmp/log" 2>&1 &&
       "$pdonnx" export "$tmp/ock" -o "$tmp/o/one.onnx" > /dev/null 2>&1 &&
       "$initcmp" "$tmp/o/one.onnx" "$tmp/o/mpi.onnx" > "$tmp/cmp" && grep -q "weights as external data" "$tmp/log" &&
       [ -s "$tmp/mck/ckpt-000000000002/part-1.bin" ] && ! "$initcmp" "$small/mlp.onnx" "$tmp/o/mpi.onnx" > /dev/null; then
      ok "export of a 2-process checkpoint equals the one-process run's ($(cat "$tmp/cmp"))"
    else
      bad "export of a 2-process checkpoint: $(cat "$tmp/cmp" 2>/dev/null) $(tail -2 "$tmp/log")"
    fi
  elif grep -q "built without MPI" "$tmp/log"; then
    echo "built without MPI: the 2-process export skipped"
  else
    bad "a 2-process run to export: $(tail -2 "$tmp/log")"
  fi
fi

echo "$fails failed"
[ "$fails" = 0 ]
