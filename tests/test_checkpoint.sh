#!/usr/bin/env bash
# test_checkpoint.sh PDONNX SOURCE_ROOT - checkpoints end to end with the CLI:
# training killed with SIGKILL at random points (while training, while
# persisting) and resumed until done gives the same trained model (bitwise)
# and the same per-step losses as an uninterrupted run, on one stage and as
# pipelines (pipedream, 2bw, flush); a corrupted newest checkpoint is reported
# and the previous one used; `pdonnx export` writes the trained model; a
# resume with other settings is refused, naming the setting. Hostile
# folders: symlinked checkpoints and temporaries are never followed by
# clean-up; an edited manifest or a FIFO part is skipped like a corrupted
# checkpoint; with none valid the error says so once.
set -u
pdonnx=$1
root=$2
. "$(dirname "$0")/common.sh"
# the kill times are random: the seed is printed, PD_TEST_SEED=N repeats a run
seed=${PD_TEST_SEED:-$(( $(date +%s) % 32768 ))}
echo "# kill times from seed $seed (PD_TEST_SEED=$seed repeats them)"
RANDOM=$seed
model=$root/examples/digits_mlp.onnx
# the loss and lr columns of a metrics file
cols() { sed 's/, "samples_per_s".*//' "$1"; }

steps=1500
# the pipelines' plan made once, by parameter counts: a plan from measured
# times (--stages 2) can split elsewhere in the next run, and a layer on
# another stage of pipedream or 2bw trains with another delay
"$pdonnx" plan "$model" --batch 32 --workers 2 --straight --algo params -o "$tmp/plan.json" > /dev/null || bad "the plan"
for mode in "single" "pipedream" "2bw" "flush"; do
  case $mode in
    single) flags=(--threads 1) ;;
    *) flags=(--plan "$tmp/plan.json" --schedule "$mode") ;;
  esac
  common=("$model" --steps $steps --quiet "${flags[@]}")
  "$pdonnx" train "${common[@]}" --save "$tmp/ref.onnx" --metrics "$tmp/ref.jsonl" || { bad "$mode: the reference run"; continue; }
  # killed at random points, resumed until it finishes
  for trial in 1 2 3; do
    d=$tmp/ck-$mode-$trial
    rm -f "$tmp/out.onnx" "$tmp/m.jsonl"
    kills=0
    resumes=0
    resumed=()
    done_=0
    for attempt in 1 2 3 4 5 6 7 8; do
      [ ${#resumed[@]} -gt 0 ] && resumes=$((resumes + 1))
      "$pdonnx" train "${common[@]}" --checkpoint-dir "$d" --checkpoint-every 7 --save "$tmp/out.onnx" \
        --metrics "$tmp/m.jsonl" "${resumed[@]}" > "$tmp/log" 2>&1 &
      pid=$!
      # a random moment in the first 0.02-0.3 s; the last attempt runs to the end
      if [ $attempt -lt 4 ]; then
        sleep "0.$(printf '%02d' $(( (RANDOM % 28) + 2 )))"
        kill -9 $pid 2>/dev/null && kills=$((kills + 1))
      fi
      wait $pid 2>/dev/null
      rc=$?
      if [ $rc = 0 ]; then done_=1; break; fi
      # resume only once a checkpoint exists
      if ls "$d"/ckpt-* > /dev/null 2>&1; then resumed=(--resume "$d"); else resumed=(); fi
    done
    if [ $done_ = 1 ] && cmp -s "$tmp/ref.onnx" "$tmp/out.onnx" && [ "$(cols "$tmp/ref.jsonl")" = "$(cols "$tmp/m.jsonl")" ]; then
      ok "$mode, trial $trial: killed $kills time(s), resumed $resumes time(s): the same model bitwise and the same $steps losses"
    else
      bad "$mode, trial $trial: killed $kills time(s): done=$done_; $(tail -2 "$tmp/log")"
      diff <(cols "$tmp/ref.jsonl") <(cols "$tmp/m.jsonl") | head -5
    fi
    ls -a "$d" | grep -q '^\.ckpt-' && [ $done_ = 1 ] && bad "$mode: a temporary folder was left behind"
  done
done

# killed while persisting: a checkpoint after every step keeps the writer busy most of the time
fx=$root/tests/fixtures/gpt
"$pdonnx" plan "$fx/model.onnx" --batch 4 --workers 2 --straight --algo params -o "$tmp/gplan.json" > /dev/null ||
  bad "gpt: the plan"
common=("$fx/model.onnx" --data "$fx/train/sgd/X.npy" --labels "$fx/train/sgd/Y.npy" --batch 8 --steps 400
        --no-shuffle --quiet --plan "$tmp/gplan.json" --schedule 2bw --microbatches 2)
"$pdonnx" train "${common[@]}" --save "$tmp/gref.onnx" > /dev/null 2>&1 || bad "gpt: the reference run"
d=$tmp/ck-busy
mid=0
for attempt in 1 2 3 4 5 6; do
  resumed=()
  ls "$d"/ckpt-* > /dev/null 2>&1 && resumed=(--resume "$d")
  "$pdonnx" train "${common[@]}" --checkpoint-dir "$d" --checkpoint-every 1 --save "$tmp/gout.onnx" "${resumed[@]}" \
    > "$tmp/log" 2>&1 &
  pid=$!
  if [ $attempt -lt 4 ]; then
    sleep "0.$(printf '%02d' $(( (RANDOM % 40) + 10 )))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    ls -a "$d" 2>/dev/null | grep -q '^\.ckpt-.*\.tmp-' && mid=$((mid + 1)) # a persist was cut short
  else
    wait $pid && break
  fi
done
if cmp -s "$tmp/gref.onnx" "$tmp/gout.onnx"; then
  ok "gpt, 2bw, a checkpoint every step: killed 3 times ($mid while a checkpoint was being written), resumed: the same model bitwise"
else
  bad "gpt, killed while persisting: $(tail -2 "$tmp/log")"
fi

# a corrupted newest checkpoint: reported, the previous one used, the same result
d=$tmp/ck-corrupt
"$pdonnx" train "$model" --steps 40 --quiet --stages 2 --schedule pipedream --checkpoint-dir "$d" \
  --checkpoint-every 10 --save "$tmp/ref40.onnx" || bad "corrupt: the run"
"$pdonnx" export "$d" -o "$tmp/exported.onnx" > "$tmp/log" 2>&1
if cmp -s "$tmp/ref40.onnx" "$tmp/exported.onnx" && grep -q "step 40" "$tmp/log"; then
  ok "export: the last checkpoint's model equals the trained one"
else
  bad "export: $(cat "$tmp/log")"
fi
rm -rf "$d/ckpt-000000000040"
printf 'X' | dd of="$d/ckpt-000000000030/part-1.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
"$pdonnx" train "$model" --steps 40 --stages 2 --schedule pipedream --resume "$d" --save "$tmp/out40.onnx" \
  > "$tmp/log" 2>&1
if grep -q "skipping .*ckpt-000000000030.*checksum mismatch" "$tmp/log" && grep -q "resuming from .*ckpt-000000000020" "$tmp/log" &&
   cmp -s "$tmp/ref40.onnx" "$tmp/out40.onnx"; then
  ok "corrupt: the bad checkpoint is reported, the one before it used, the same model"
else
  bad "corrupt: $(cat "$tmp/log")"
fi

# resuming with other settings is refused, naming them
"$pdonnx" train "$model" --steps 40 --stages 2 --schedule flush --resume "$d" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "schedule 'pipedream', this run has 'flush'" "$tmp/log"; then
  ok "refused: another schedule ($(head -1 "$tmp/log"))"
else
  bad "refused: another schedule: rc $rc: $(cat "$tmp/log")"
fi
"$pdonnx" train "$model" --steps 50 --stages 2 --schedule pipedream --resume "$d" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "steps 40, this run has 50" "$tmp/log"; then ok "refused: other --steps"; else bad "refused: other --steps: $(cat "$tmp/log")"; fi
"$pdonnx" train "$model" --steps 40 --resume "$tmp/nowhere" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "nowhere" "$tmp/log"; then ok "refused: no checkpoint folder"; else bad "refused: no folder: $(cat "$tmp/log")"; fi
"$pdonnx" train "$model" --steps 40 --checkpoint-every 5 > "$tmp/log" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "checkpoint-dir" "$tmp/log"; then ok "refused: --checkpoint-every without a folder"; else bad "every without dir: $(cat "$tmp/log")"; fi
"$pdonnx" export "$tmp/nowhere" -o "$tmp/x.onnx" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "nowhere" "$tmp/log" && [ ! -e "$tmp/x.onnx" ]; then ok "export: no checkpoint"; else bad "export nowhere: $(cat "$tmp/log")"; fi

# hostile folders (issue 22). Clean-up never deletes through a link: a
# checkpoint folder the run writes again, one --checkpoint-keep rotates out
# and a stale temporary, each a link to a folder outside, which keeps its files
victim=$tmp/victim
mkdir -p "$victim" "$tmp/ck-links"
vfiles="part-0.bin part-0.json manifest.json notes.txt"
for f in $vfiles; do echo "$f" > "$victim/$f"; done
ln -s "$victim" "$tmp/ck-links/ckpt-000000000020"
ln -s "$victim" "$tmp/ck-links/ckpt-000000000005"
ln -s "$victim" "$tmp/ck-links/.ckpt-000000000007.tmp-1"
"$pdonnx" train "$model" --steps 40 --quiet --checkpoint-dir "$tmp/ck-links" --checkpoint-every 10 --checkpoint-keep 2 \
  > "$tmp/log" 2>&1
rc=$?
whole=1
for f in $vfiles; do [ "$(cat "$victim/$f" 2>/dev/null)" = "$f" ] || whole=0; done
left=$(cd "$tmp/ck-links" && ls -A | tr '\n' ' ')
if [ $rc = 0 ] && [ $whole = 1 ] && [ "$left" = "ckpt-000000000030 ckpt-000000000040 " ]; then
  ok "links: a symlinked checkpoint rewritten, one rotated out and a stale temporary: the links go, the folder they named keeps its files"
else
  bad "links: rc $rc, the folder outside whole: $whole ($(ls "$victim" | tr '\n' ' ')), left: $left; $(tail -2 "$tmp/log")"
fi

# a manifest edited is a corrupted checkpoint: skipped with a warning, the
# one before used, the same model (its step once resumed "at step 20" with
# step 40's weights; -7 and 1e300 hung the run)
ed=$tmp/ck-edit-ref
"$pdonnx" train "$model" --steps 40 --quiet --stages 2 --schedule pipedream --checkpoint-dir "$ed" \
  --checkpoint-every 10 --checkpoint-keep 0 --save "$tmp/eref.onnx" || bad "edited: the run"
for edit in 's/"step":\t40/"step":\t20/' 's/"step":\t40/"step":\t-7/' 's/"step":\t40/"step":\t1e300/' \
            's/"steps":\t40/"steps":\t41/' 's/"schedule":/"schedulf":/' 's/"part-1.bin"/"part-0.bin"/'; do
  rm -rf "$tmp/ck-edit"
  cp -r "$ed" "$tmp/ck-edit"
  sed -i "$edit" "$tmp/ck-edit/ckpt-000000000040/manifest.json"
  timeout 20 "$pdonnx" train "$model" --steps 40 --stages 2 --schedule pipedream --resume "$tmp/ck-edit" \
    --save "$tmp/eout.onnx" > "$tmp/log" 2>&1
  rc=$?
  if [ $rc = 0 ] && grep -q "warning: skipping .*ckpt-000000000040.*checksum mismatch" "$tmp/log" &&
     grep -q "resuming from .*ckpt-000000000030" "$tmp/log" && cmp -s "$tmp/eref.onnx" "$tmp/eout.onnx"; then
    ok "edited: sed '$edit' on the newest manifest: skipped with a warning, the one before used, the same model"
  else
    bad "edited: sed '$edit': rc $rc: $(head -3 "$tmp/log")"
  fi
done

# a FIFO for a part of the newest: skipped at once, naming it (reading it blocked for ever)
rm -rf "$tmp/ck-edit"
cp -r "$ed" "$tmp/ck-edit"
rm "$tmp/ck-edit/ckpt-000000000040/part-0.bin"
mkfifo "$tmp/ck-edit/ckpt-000000000040/part-0.bin"
timeout 20 "$pdonnx" train "$model" --steps 40 --stages 2 --schedule pipedream --resume "$tmp/ck-edit" \
  --save "$tmp/eout.onnx" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "skipping .*ckpt-000000000040/part-0.bin: not a regular file" "$tmp/log" &&
   cmp -s "$tmp/eref.onnx" "$tmp/eout.onnx"; then
  ok "fifo: a FIFO for a part is skipped at once, naming it; the one before used"
else
  bad "fifo: rc $rc (124: blocked): $(head -3 "$tmp/log")"
fi

# no checkpoint, or none valid: one line saying so (it read "--resume D: --resume D: oint there")
mkdir -p "$tmp/ck-none"
"$pdonnx" train "$model" --steps 40 --resume "$tmp/ck-none" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -Fqx "pdonnx: --resume $tmp/ck-none: no checkpoint there" "$tmp/log"; then
  ok "refused: an empty folder ($(grep resume "$tmp/log"))"
else
  bad "refused: an empty folder: rc $rc: $(cat "$tmp/log")"
fi
rm -rf "$tmp/ck-edit"
mkdir -p "$tmp/ck-edit"
cp -r "$ed/ckpt-000000000040" "$tmp/ck-edit/"
sed -i 's/"step":\t40/"step":\t20/' "$tmp/ck-edit/ckpt-000000000040/manifest.json"
"$pdonnx" train "$model" --steps 40 --stages 2 --schedule pipedream --resume "$tmp/ck-edit" > "$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -Fqx "pdonnx: --resume $tmp/ck-edit: no valid checkpoint there" "$tmp/log"; then
  ok "refused: nothing valid, the one skipped reported"
else
  bad "refused: nothing valid: rc $rc: $(cat "$tmp/log")"
fi

echo "$fails failed"
[ $fails = 0 ]
