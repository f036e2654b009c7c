#!/usr/bin/env bash
# test_cli_cuda.sh - `pdonnx train|profile --device cuda` end to end (suite
# cuda): exits 77 (skipped) where the build has no CUDA backend or the machine
# no GPU. On a GPU: the digits MLP trains 30 steps on one stage in fp32 with
# the CPU's per-step losses (1e-4 relative), in tf32 and bf16 close to them
# (3e-2 and 1e-1), writes metrics and a trained model that runs; as a
# pipeline of 2 stages on the GPU (--stages 2, flush and gpipe) with the same
# losses, and a run of GPU stages killed after a checkpoint and resumed gives
# the uninterrupted run's model bitwise; AvgPipe's 2 and 3 pipelines of GPU
# stages give the CPU stages' losses and centre (bitwise on the simulated
# device); profile --device cuda
# writes a profile that says cuda; a model whose every op runs on the GPU.
#   test_cli_cuda.sh PDONNX SOURCE_DIR
set -u
pdonnx=$1 src=$2
ex=$src/examples fx=$src/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "OK $*"; pass=$((pass + 1)); }
notok() { echo "NOT OK $*"; fail=$((fail + 1)); }

if ! "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device cuda --quiet >"$tmp/out" 2>&1; then
  if grep -q "device cuda: " "$tmp/out"; then
    echo "skipped: $(cat "$tmp/out")"
    exit 77
  fi
fi

losses() { grep -o '"loss": [^,]*' "$1" | cut -d' ' -f2; }
close() { # close A.jsonl B.jsonl TOL: same number of steps, per-step losses within TOL relative
  [ "$(wc -l <"$1")" -eq "$(wc -l <"$2")" ] && [ "$(wc -l <"$1")" -gt 0 ] &&
  paste -d' ' <(losses "$1") <(losses "$2") |
    awk -v tol="$3" '{d = $1 - $2; if (d < 0) d = -d; if (d > tol * ($1 > 0 ? $1 : -$1) + 1e-7) bad = 1} END {exit bad}'
}
common=(--steps 30 --no-shuffle --optimizer momentum --lr 0.05 --quiet) # not Adam: it magnifies near-zero gradients
"$pdonnx" train "$ex/digits_mlp.onnx" "${common[@]}" --metrics "$tmp/cpu.jsonl" >"$tmp/out" 2>&1 ||
  notok "train on the CPU: $(tail -c 400 "$tmp/out")"
for p in fp32 tf32 bf16; do
  case $p in fp32) tol=1e-4 ;; tf32) tol=3e-2 ;; *) tol=1e-1 ;; esac
  if "$pdonnx" train "$ex/digits_mlp.onnx" "${common[@]}" --device cuda --precision $p --metrics "$tmp/$p.jsonl" \
       --save "$tmp/$p.onnx" >"$tmp/out" 2>&1 && close "$tmp/cpu.jsonl" "$tmp/$p.jsonl" $tol && [ -s "$tmp/$p.onnx" ] \
     && "$pdonnx" run "$tmp/$p.onnx" --input x="$ex/digits/val_x.npy" >/dev/null 2>&1 \
     && ! cmp -s "$tmp/$p.onnx" "$ex/digits_mlp.onnx"; then
    ok "train --device cuda --precision $p: 30 losses within $tol of the CPU's, the saved model runs"
  else
    notok "train --device cuda --precision $p: $(tail -c 400 "$tmp/out"); losses: $(paste -d' ' <(losses "$tmp/cpu.jsonl") <(losses "$tmp/$p.jsonl" 2>/dev/null) | head -5 | tr '\n' ';')"
  fi
done
# the pipeline on the GPU: 2 stages on cuda:0 (flush, and gpipe, over 4 microbatches) give one stage's losses
for sch in flush gpipe; do
  if "$pdonnx" train "$ex/digits_mlp.onnx" "${common[@]}" --device cuda --stages 2 --schedule $sch --microbatches 4 \
       --metrics "$tmp/pipe-$sch.jsonl" --save "$tmp/pipe-$sch.onnx" >"$tmp/out" 2>&1 \
     && close "$tmp/cpu.jsonl" "$tmp/pipe-$sch.jsonl" 1e-4 && [ -s "$tmp/pipe-$sch.onnx" ] \
     && "$pdonnx" run "$tmp/pipe-$sch.onnx" --input x="$ex/digits/val_x.npy" >/dev/null 2>&1; then
    ok "train --device cuda --stages 2 --schedule $sch: 30 losses within 1e-4 of one stage on the CPU, the saved model runs"
  else
    notok "train --device cuda --stages 2 --schedule $sch: $(tail -c 400 "$tmp/out"); losses: $(paste -d' ' <(losses "$tmp/cpu.jsonl") <(losses "$tmp/pipe-$sch.jsonl" 2>/dev/null) | head -5 | tr '\n' ';')"
  fi
done
# checkpoints of GPU stages: a run killed once a checkpoint exists, then resumed to its end, gives the
# uninterrupted run's model bitwise and its losses (flush; 2bw, whose stashes are in the snapshot)
cols() { sed 's/, "samples_per_s".*//' "$1"; }
for sch in flush 2bw; do
  ck=(--steps 1500 --no-shuffle --device cuda --stages 2 --schedule $sch --microbatches 2 --quiet)
  d=$tmp/ck-$sch
  "$pdonnx" train "$ex/digits_mlp.onnx" "${ck[@]}" --save "$tmp/ref-$sch.onnx" --metrics "$tmp/ref-$sch.jsonl" \
    >"$tmp/out" 2>&1 || notok "train --device cuda --stages 2 --schedule $sch: $(tail -c 300 "$tmp/out")"
  "$pdonnx" train "$ex/digits_mlp.onnx" "${ck[@]}" --checkpoint-dir "$d" --checkpoint-every 5 --save "$tmp/ck-$sch.onnx" \
    --metrics "$tmp/ck-$sch.jsonl" >"$tmp/out" 2>&1 &
  pid=$!
  for _ in $(seq 500); do ls "$d"/ckpt-* >/dev/null 2>&1 && break; sleep 0.02; done
  kill -9 $pid 2>/dev/null && killed=1 || killed=0
  wait $pid 2>/dev/null
  "$pdonnx" train "$ex/digits_mlp.onnx" "${ck[@]}" --checkpoint-dir "$d" --checkpoint-every 5 --resume "$d" \
    --save "$tmp/ck-$sch.onnx" --metrics "$tmp/ck-$sch.jsonl" >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ $killed = 1 ] && cmp -s "$tmp/ref-$sch.onnx" "$tmp/ck-$sch.onnx" &&
     [ "$(cols "$tmp/ref-$sch.jsonl")" = "$(cols "$tmp/ck-$sch.jsonl")" ]; then
    ok "train --device cuda --stages 2 --schedule $sch: killed after a checkpoint, resumed: the same model bitwise and the same 1500 losses"
  else
    notok "train --device cuda --stages 2 --schedule $sch, killed ($killed) and resumed (rc $rc): $(tail -c 300 "$tmp/out")"
  fi
done
# AvgPipe's K pipelines of GPU stages (elastic updates on the host copies, uploaded again): the CPU stages'
# losses (every pipeline's) and centre, bitwise on the simulated device (its kernels are the CPU's), else 1e-4
case ${PDONNX_CUDA_MODULE:-} in sim*) sim=1 ;; *) sim=0 ;; esac
avcols() { sed 's/"samples_per_s": [^,]*, //' "$1"; } # the step, losses (each pipeline's too), lr, epoch
for kk in 2:avgpipe 3:flush; do
  K=${kk%%:*} s=${kk#*:}
  av=(--steps 20 --no-shuffle --stages 2 --schedule $s --microbatches 4 --parallel-pipelines $K --elastic-alpha 0.25
      --average-every 4 --optimizer momentum --lr 0.05)
  "$pdonnx" train "$ex/digits_mlp.onnx" "${av[@]}" --metrics "$tmp/avgc-$K.jsonl" --save "$tmp/avgc-$K.onnx" \
    >"$tmp/out" 2>&1 || notok "train --parallel-pipelines $K on the CPU: $(tail -c 300 "$tmp/out")"
  if "$pdonnx" train "$ex/digits_mlp.onnx" "${av[@]}" --device cuda --metrics "$tmp/avgg-$K.jsonl" \
       --save "$tmp/avgg-$K.onnx" >"$tmp/out" 2>&1 && grep -q "5 elastic updates" "$tmp/out" &&
     [ "$(grep -c "\"pipeline_loss\": \[[^]]*\]" "$tmp/avgg-$K.jsonl")" -eq 20 ] &&
     if [ $sim = 1 ]; then
       [ "$(avcols "$tmp/avgc-$K.jsonl")" = "$(avcols "$tmp/avgg-$K.jsonl")" ] && cmp -s "$tmp/avgc-$K.onnx" "$tmp/avgg-$K.onnx"
     else
       close "$tmp/avgc-$K.jsonl" "$tmp/avgg-$K.jsonl" 1e-4 && "$pdonnx" run "$tmp/avgg-$K.onnx" --input x="$ex/digits/val_x.npy" >/dev/null 2>&1
     fi; then
    ok "train --device cuda --parallel-pipelines $K --schedule $s: 5 elastic updates, the CPU's losses and centre ($([ $sim = 1 ] && echo bitwise || echo 1e-4))"
  else
    notok "train --device cuda --parallel-pipelines $K --schedule $s: $(tail -c 400 "$tmp/out"); losses: $(paste -d' ' <(losses "$tmp/avgc-$K.jsonl") <(losses "$tmp/avgg-$K.jsonl" 2>/dev/null) | head -5 | tr '\n' ';')"
  fi
done
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 5 --device cuda:0 --quiet >"$tmp/out" 2>&1; then
  ok "train --device cuda:0"
else
  notok "train --device cuda:0: $(tail -c 400 "$tmp/out")"
fi
if "$pdonnx" train "$ex/digits_mlp.onnx" --steps 1 --device cuda:99 --quiet >"$tmp/out" 2>&1; then
  notok "train --device cuda:99 ran"
elif [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q "device cuda:99: this machine has" "$tmp/out"; then
  ok "train --device cuda:99: $(cat "$tmp/out")"
else
  notok "train --device cuda:99: $(cat "$tmp/out")"
fi
for m in mlp cnn_bn gpt; do
  if "$pdonnx" profile "$fx/$m/model.onnx" --batch 4 --device cuda --warmup 1 --repeats 3 -o "$tmp/$m.json" \
       >"$tmp/out" 2>&1 && grep -q '"device":[[:space:]]*"cuda' "$tmp/$m.json"; then
    ok "profile $m --device cuda (CUDA events)"
  else
    notok "profile $m --device cuda: $(tail -c 400 "$tmp/out")"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
