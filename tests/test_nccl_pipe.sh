#!/usr/bin/env bash
# test_nccl_pipe.sh PDONNX SOURCE_ROOT TEST_NCCL - GPU stages in two MPI
# processes, one GPU each (a plan putting stage s on cuda:s), their
# activations and gradients over the NCCL transport (suite nccl): flush
# gives one stage's per-step losses (1e-4 relative), pipedream and 2bw the
# same losses as the same plan's stages as threads of one process on the
# same GPUs (peer copies instead of NCCL), and every run saves a model that
# runs. Skipped (77) without mpirun, the NCCL transport or two GPUs.
set -u
pdonnx=$1 root=$2 tn=$3
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
[ $fails -eq 0 ]
