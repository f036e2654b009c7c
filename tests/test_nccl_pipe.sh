#!/usr/bin/env bash
# test_nccl_pipe.sh PDONNX SOURCE_ROOT TEST_NCCL TEST_MPI_API NPYTOOL - GPU
# stages in two MPI processes, one GPU each (a plan putting stage s on
# cuda:s), their activations and gradients over the NCCL transport (suite
# nccl): flush gives one stage's per-step losses (1e-4 relative), pipedream
# and 2bw the same losses as the same plan's stages as threads of one
# process on the same GPUs (peer copies instead of NCCL), and every run
# saves a model that runs. Failures, as tests/test_mpi.sh and
# test_mpi_api.sh check them on the CPU: a NaN loss on rank 1 mid-run
# through the public trainer (which ends no job) is an error on both
# processes naming stage 1 and its step, rank 0 hearing of it while it
# waits on NCCL for rank 1's gradients, no hang; the same under `mpirun
# pdonnx train` ends the job non-zero within seconds, naming rank 1; a rank
# killed mid-run ends the job within seconds. Skipped (77) without mpirun,
# the NCCL transport or two GPUs.
set -u
pdonnx=$1 root=$2 tn=$3 api=${4:-} npytool=${5:-}
. "$(dirname "$0")/common.sh"
mpi_setup
n=$("$tn" --devices 2>/dev/null || echo 0)
[ "${n:-0}" -ge 2 ] || { echo "$n CUDA devices (two processes, a GPU each): skipped"; exit 77; }
model=$root/examples/digits_mlp.onnx
losses() { grep -o '"loss": [^,]*' "$1" | cut -d' ' -f2; }
close() { # close A.jsonl B.jsonl TOL: the same steps, per-step losses within TOL relative
  [ "$(wc -l <"$1")" -eq "$(wc -l <"$2")" ] && [ "$(wc -l <"$1")" -gt 0 ] &&
  paste -d' ' <(losses "$1") <(losses "$2") |
    awk -v tol="$3" '{d = $1 - $2; if (d < 0) d = -d; if (d > tol * ($1 > 0 ? $1 : -$1) + 1e-7) bad = 1} END {exit bad}'
}
common=(--steps 20 --no-shuffle --optimizer momentum --lr 0.05 --quiet)
"$pdonnx" train "$model" "${common[@]}" --metrics "$tmp/one.jsonl" >"$tmp/log" 2>&1 ||
  bad "one stage on the CPU: $(tail -c 300 "$tmp/log")"
"$pdonnx" plan "$model" --workers 2 --straight --batch 8 -o "$tmp/p.json" >/dev/null
python3 - "$tmp/p.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for s, st in enumerate(p["stages"]):
    st["device"] = s  # stage s on cuda:s: one GPU per process, as NCCL needs
json.dump(p, open(sys.argv[1], "w"))
PY
for s in flush pipedream 2bw; do
  m=4
  [ $s = pipedream ] && m=1
  if mpi 2 "$pdonnx" train "$model" "${common[@]}" --plan "$tmp/p.json" --device cuda --schedule $s \
       --microbatches $m --metrics "$tmp/$s-mpi.jsonl" --save "$tmp/$s.onnx" >"$tmp/log" 2>&1 \
     && "$pdonnx" train "$model" "${common[@]}" --plan "$tmp/p.json" --device cuda --schedule $s --microbatches $m \
       --metrics "$tmp/$s-one.jsonl" >>"$tmp/log" 2>&1 \
     && close "$tmp/$s-one.jsonl" "$tmp/$s-mpi.jsonl" 1e-5 \
     && { [ $s != flush ] || close "$tmp/one.jsonl" "$tmp/$s-mpi.jsonl" 1e-4; } \
     && "$pdonnx" run "$tmp/$s.onnx" --input x="$root/examples/digits/val_x.npy" >/dev/null 2>&1; then
    ok "mpirun -np 2 train --device cuda --schedule $s: NCCL between the stages, the losses of one process"
  else
    bad "mpirun -np 2 train --device cuda --schedule $s: $(tail -c 600 "$tmp/log"); losses: $(paste -d' ' <(losses "$tmp/$s-one.jsonl" 2>/dev/null) <(losses "$tmp/$s-mpi.jsonl" 2>/dev/null) | head -4 | tr '\n' ';')"
  fi
done
# a NaN loss on rank 1 at step 3, through the public trainer: every process returns an error
if [ -n "$api" ]; then
  start=$(date +%s)
  PD_TEST_DEVICE=cuda mpi 2 "$api" "$model" "$tmp/p.json" flush 4 6 "$tmp/n.onnx" nan >"$tmp/nan.txt" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 120 ] &&
     [ "$(grep -c "^rank [01]: error: .*stage 1, step 3.*nan" "$tmp/nan.txt")" = 2 ]; then
    ok "GPU stages over NCCL: a NaN loss on rank 1 at step 3 is an error on both processes naming it (${took}s)"
  else
    bad "GPU stages over NCCL, a failure mid-run (exit $rc, ${took}s): $(grep -v '^step' "$tmp/nan.txt" | head -5)"
  fi
fi
# the same under the CLI: a NaN in row 900 is step 113 at batch 8 (no shuffle)
[ -n "$npytool" ] && "$npytool" set "$root/examples/digits/train_x.npy" "$tmp/nan_x.npy" $((900 * 64)) nan >/dev/null
if [ -s "$tmp/nan_x.npy" ]; then
  start=$(date +%s)
  mpi 2 "$pdonnx" train "$model" --steps 200 --no-shuffle --optimizer momentum --lr 0.05 --plan "$tmp/p.json" \
    --device cuda --schedule flush --microbatches 4 --data "$tmp/nan_x.npy" >"$tmp/log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "rank 1: .*stage 1, step 113" "$tmp/log" && [ $took -lt 120 ]; then
    ok "--device cuda: a failing process ends the job in ${took} s: $(grep 'rank 1:' "$tmp/log" | head -1)"
  else
    bad "mpirun pdonnx train --device cuda, a failing process: rc $rc after ${took} s: $(head -5 "$tmp/log")"
  fi
else
  echo "(no npytool: the failing-process check under the CLI skipped)"
fi
# a rank killed mid-run: the job ends within seconds, non-zero
# (10 s: past the set-up, CUDA contexts and NCCL's initialization)
kill_rank 10 "pdonnx train $model --steps 200000" 2 "$pdonnx" train "$model" --steps 200000 --plan "$tmp/p.json" \
  --device cuda --schedule flush --quiet
if [ -n "$victim" ] && [ $rc != 0 ] && [ $took -lt 30 ]; then
  ok "mpirun pdonnx train --device cuda: a process killed mid-run ended the job in ${took} s with $rc"
else
  bad "--device cuda, a killed process: victim '$victim', rc $rc after ${took} s: $(tail -3 "$tmp/log")"
fi
[ $fails -eq 0 ]
