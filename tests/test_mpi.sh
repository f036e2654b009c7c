#!/usr/bin/env bash
# test_mpi.sh [--device cuda] PDONNX SOURCE_ROOT NPYTOOL GEN_MLP PEAKRSS - `mpirun pdonnx train` against the
# same plan trained in one process: every schedule on 2-3 processes gives the
# same per-step losses and the same trained model (bitwise), a hybrid plan
# (stage 0 replicated on two processes, stage 1 on a third; flush, gpipe,
# pipedream) too; a process
# killed mid-run ends the job within seconds, non-zero; a process that fails
# names its rank, stage and step (once), every process exiting 1 without
# MPI_Abort; a data problem every process finds is
# reported once; tied weights (a table read on the first and last stage)
# under gpipe, flush, zb-h1 and interleaved the same as one process too, and
# refused under pipedream; replicated stages sharing processes with other
# stages (flush with clipping, zb-h1, pipedream, 2bw, gpipe, avgpipe) the same
# as one process too, two replicas of one stage on one rank refused once;
# checkpoints across processes (2 stages on 2, 4 on 2, a hybrid plan,
# replicas sharing processes; --checkpoint-every N and CheckFreq's auto,
# agreed by the processes) resume to the uninterrupted model, bitwise. Skipped (77)
# without mpirun or a build without MPI. With --device cuda (test mpi-devsim, on the
# simulated device) only GPU stages under mpirun against the same plan's CPU stages
# in one process, bitwise: 2-3 stages, a replicated stage across processes, several
# stages per process, tied weights (and their checkpoints resumed), AvgPipe's 2
# pipelines of 2 stages on 4 processes (a process holding a replica r > 0 alone); skipped (77)
# where --device cuda cannot train.
set -u
dev=
if [ "${1:-}" = --device ]; then dev=$2; shift 2; fi
mflags=()
pdonnx=$1
root=$2
npytool=$3
gen_mlp=${4:-}
peakrss=${5:-}
. "$(dirname "$0")/common.sh"
mpi_setup
model=$root/examples/digits_mlp.onnx
cols() { sed 's/, "samples_per_s": [0-9.]*//' "$1"; } # all but the speed

if ! mpi 2 "$pdonnx" train "$model" --steps 2 --stages 2 --quiet > "$tmp/log" 2>&1; then
  if grep -q "built without MPI" "$tmp/log"; then echo "built without MPI: skipped"; exit 77; fi
  bad "a first 2-process run: $(cat "$tmp/log")"
fi

# the plans: 2 and 3 straight stages, 2 stages x 2 chunks, and stage 0 replicated twice
"$pdonnx" plan "$model" --workers 2 --straight --batch 8 -o "$tmp/p2.json" > /dev/null
"$pdonnx" plan "$model" --workers 3 --straight --algo uniform --batch 8 -o "$tmp/p3.json" > /dev/null
"$pdonnx" plan "$model" --workers 4 --straight --algo uniform --batch 8 -o "$tmp/p4.json" > /dev/null
python3 - "$tmp/p2.json" "$tmp/ph.json" "$tmp/p4.json" "$tmp/pi.json" <<'EOF'
import json, sys
q = json.load(open(sys.argv[3]))
q["chunks"] = 2  # 4 virtual stages on 2 workers
json.dump(q, open(sys.argv[4], "w"))
p = json.load(open(sys.argv[1]))
p["stages"][0]["replicas"] = 2
p["stages"][0]["ranks"] = [0, 1]
p["stages"][1]["ranks"] = [2]
p["workers"] = 3
json.dump(p, open(sys.argv[2], "w"))
EOF
python3 - "$tmp/p2.json" "$tmp/pswap.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["ranks"], p["stages"][1]["ranks"] = [1], [0]  # stage_to_rank: stage 0 on rank 1
json.dump(p, open(sys.argv[2], "w"))
EOF
# several stages per process: the plan's stage_to_rank puts stages 0-1 on
# rank 0 and 2-3 on rank 1 (between them in-process queues, across MPI)
python3 - "$tmp/p4.json" "$tmp/p4on2.json" <<'EOF2'
import json, sys
p = json.load(open(sys.argv[1]))
for s, r in zip(p["stages"], [0, 0, 1, 1]):
    s["ranks"] = [r]
json.dump(p, open(sys.argv[2], "w"))
EOF2
# a replicated stage's replica sharing a process with other stages: stage 0 on ranks [0, 1] and
# stage 1 on [1] (rank 1 runs stage 0's replica 1 and stage 1 as threads), stage 0 on [0] and stage
# 1 replicated on [0, 1], and 3 stages: 0 on [0, 1], 1 on [1], 2 on [1, 2] (rank 1 runs three
# threads, two of them replicas of different stages, each in its own replica group)
python3 - "$tmp/p2.json" "$tmp/p3.json" "$tmp" <<'EOF2'
import json, sys
def plan(src, out, reps, ranks):
    p = json.load(open(src))
    for s, n, r in zip(p["stages"], reps, ranks):
        s["replicas"], s["ranks"] = n, r
    p["workers"] = sum(reps)
    json.dump(p, open(out, "w"))
plan(sys.argv[1], f"{sys.argv[3]}/rs0.json", [2, 1], [[0, 1], [1]])
plan(sys.argv[1], f"{sys.argv[3]}/rs1.json", [1, 2], [[0], [0, 1]])
plan(sys.argv[2], f"{sys.argv[3]}/rs3.json", [2, 1, 2], [[0, 1], [1], [1, 2]])
plan(sys.argv[1], f"{sys.argv[3]}/rs2x.json", [2, 1], [[1, 1], [0]])
plan(sys.argv[2], f"{sys.argv[3]}/p3on2.json", [1, 1, 1], [[0], [0], [1]])  # stages 0-1 on rank 0, 2 on rank 1
EOF2
tied=$root/tests/fixtures/tied
# tied weights: plans by hand (tests/fixtures/tied: the table is also the output layer; tied3: read by a third node)
python3 - "$pdonnx" "$root/tests/fixtures" "$tmp" <<'EOF2'
import json, subprocess, sys
pdonnx, fx, tmp = sys.argv[1:4]
rest = ["/ln/LayerNormalization", "/MatMul"]
cuts = {  # name: model, per stage its nodes, per stage its rank (chunks: 2 workers x 2 chunks)
    "t2": ("tied", [["/wte/Gather", "/fc/Transpose", "/fc/MatMul", "/fc/Add"], ["/Transpose", "/Tanh", "/Add"] + rest]),
    "t3": ("tied", [["/wte/Gather", "/fc/Transpose"], ["/fc/MatMul", "/fc/Add", "/Tanh"], ["/Transpose", "/Add"] + rest]),
    "t4": ("tied", [["/wte/Gather"], ["/fc/Transpose", "/fc/MatMul"], ["/fc/Add", "/Tanh", "/Add"], ["/Transpose"] + rest]),
    "u3": ("tied3", [["/wte/Gather", "/fc/Transpose"], ["/fc/MatMul", "/fc/Add", "/Tanh", "/wte/Gather2", "/Add2"],
                     ["/Add", "/Transpose"] + rest]),
    "u4": ("tied3", [["/wte/Gather"], ["/fc/Transpose", "/fc/MatMul", "/wte/Gather2"], ["/fc/Add", "/Tanh", "/Add2",
                     "/Add"], ["/Transpose"] + rest]),
}
variants = {"t4on2": ("t4", [0, 0, 1, 1]), "t4wrap": ("t4", [0, 1, 1, 0]), "ti": ("t4", "chunks"),
            "u4on2": ("u4", [0, 0, 1, 1]), "u4wrap": ("u4", [0, 1, 1, 0])}
for name, (model, stages) in cuts.items():
    out = f"{tmp}/{name}.json"
    subprocess.run([pdonnx, "plan", f"{fx}/{model}/model.onnx", "--workers", str(len(stages)), "--straight",
                    "--algo", "uniform", "--batch", "8", "-o", out], stdout=subprocess.DEVNULL, check=True)
    p = json.load(open(out))
    for s, nodes in zip(p["stages"], stages):
        s["nodes"] = nodes
    json.dump(p, open(out, "w"))
for name, (base, ranks) in variants.items():
    p = json.load(open(f"{tmp}/{base}.json"))
    if ranks == "chunks":
        p["chunks"] = 2  # 4 virtual stages on 2 workers: the table on worker 0's chunk 0 and worker 1's chunk 1
    else:
        for s, r in zip(p["stages"], ranks):
            s["ranks"] = [r]
    json.dump(p, open(f"{tmp}/{name}.json", "w"))
EOF2

# check: the in-process run on CPU stages against the same flags under mpirun, plus mflags there
# (--device cuda: GPU stages, bitwise the CPU stages' on the simulated device)
check() { # name np plan schedule microbatches [flags...]
  local name=$1 np=$2 plan=$3 sch=$4 mb=$5
  shift 5
  local common=("$model" --steps 60 --plan "$plan" --schedule "$sch" --microbatches "$mb" --quiet "$@")
  "$pdonnx" train "${common[@]}" --save "$tmp/in.onnx" --metrics "$tmp/in.jsonl" > "$tmp/log" 2>&1 || { bad "$name: in one process: $(cat "$tmp/log")"; return; }
  mpi "$np" "$pdonnx" train "${common[@]}" "${mflags[@]}" --save "$tmp/mpi.onnx" --metrics "$tmp/mpi.jsonl" > "$tmp/log" 2>&1 || { bad "$name: $np processes: $(tail -3 "$tmp/log")"; return; }
  if cmp -s "$tmp/in.onnx" "$tmp/mpi.onnx" && [ "$(cols "$tmp/in.jsonl")" = "$(cols "$tmp/mpi.jsonl")" ] && [ -s "$tmp/mpi.jsonl" ]; then
    ok "$name: $np processes${mflags[*]:+ (${mflags[*]})} equal one process on the CPU (60 losses and the model, bitwise)"
  else
    bad "$name: $np processes differ from one process"
    diff <(cols "$tmp/in.jsonl") <(cols "$tmp/mpi.jsonl") | head -4
  fi
}
tied_check() { # MODEL, then as check (which reads $model); later flags win
  local model=$root/tests/fixtures/$1/model.onnx args=("${@:2:5}")
  shift 6
  check "${args[@]}" --data "$tied/train/sgd/X.npy" --labels "$tied/train/sgd/Y.npy" --batch 8 --optimizer momentum \
    --lr 0.05 --clip-grad-norm 1 "$@"
}

# --device cuda: GPU stages under mpirun (suite devsim: the simulated device, PDONNX_CUDA_MODULE=sim:4,
# which has no NCCL: messages and sums through host memory over MPI) against the CPU stages in one process
if [ -n "$dev" ]; then
  mflags=(--device "$dev")
  if ! "$pdonnx" train "$model" --steps 1 --device "$dev" --quiet > "$tmp/log" 2>&1; then
    echo "no $dev device here ($(head -c 200 "$tmp/log")): skipped"; exit 77
  fi
  check "GPU stages, flush, 2 stages" 2 "$tmp/p2.json" flush 4 --clip-grad-norm 0.3
  check "GPU stages, pipedream, 2 stages" 2 "$tmp/p2.json" pipedream 1
  check "GPU stages, gpipe, 3 stages" 3 "$tmp/p3.json" gpipe 4
  check "GPU stages, 2bw, 3 stages" 3 "$tmp/p3.json" 2bw 2
  check "GPU stages, zb-h1, 3 stages, --recompute" 3 "$tmp/p3.json" zb-h1 4 --recompute
  check "GPU stages, pipedream, 3 stages, vertical sync" 3 "$tmp/p3.json" pipedream 1 --vertical-sync
  check "GPU stages, hybrid (stage 0 replicated on 2 processes), flush, clipping" 3 "$tmp/ph.json" flush 4 \
    --clip-grad-norm 0.5
  check "GPU stages, hybrid, pipedream (the replicas' round averaged)" 3 "$tmp/ph.json" pipedream 1
  # several stages per process: their links keep device buffers, the others go through host memory
  check "GPU stages, stages 0-1 on rank 0 and 2 on rank 1, flush" 2 "$tmp/p3on2.json" flush 4
  check "GPU stages, stages 0-1 on rank 0 and 2 on rank 1, gpipe" 2 "$tmp/p3on2.json" gpipe 4
  check "GPU stages, 4 stages on 2 processes, zb-h1" 2 "$tmp/p4on2.json" zb-h1 4
  check "GPU stages, 4 stages on 2 processes, pipedream" 2 "$tmp/p4on2.json" pipedream 1
  check "GPU stages, interleaved, 2 workers x 2 chunks (every link across the processes)" 2 "$tmp/pi.json" interleaved 4
  check "GPU stages, stage 0 on ranks 0-1 and stage 1 on rank 1, flush, clipping" 2 "$tmp/rs0.json" flush 4 \
    --clip-grad-norm 0.3
  check "GPU stages, stage 0 on ranks 0-1 and stage 1 on rank 1, 2bw" 2 "$tmp/rs0.json" 2bw 2
  check "GPU stages, 3 stages, 0 on ranks 0-1, 1 on 1, 2 on 1-2, pipedream" 3 "$tmp/rs3.json" pipedream 1
  # tied weights: the gradients summed through host memory, the owner's new weights sent to the other holders
  tied_check tied "GPU stages, tied weights, flush, 2 stages" 2 "$tmp/t2.json" flush 4
  tied_check tied "GPU stages, tied weights, gpipe, 3 stages (the middle process holds no copy)" 3 "$tmp/t3.json" gpipe 2
  tied_check tied "GPU stages, tied weights, zb-h1, 3 stages, adamw with weight decay" 3 "$tmp/t3.json" zb-h1 4 \
    --optimizer adamw --lr 0.01 --weight-decay 0.1
  tied_check tied "GPU stages, tied weights, interleaved, 2 workers x 2 chunks" 2 "$tmp/ti.json" interleaved 4
  tied_check tied "GPU stages, tied weights, 4 stages on 2 processes (two each), flush" 2 "$tmp/t4on2.json" flush 4
  tied_check tied "GPU stages, tied weights, 4 stages on 2 processes, the table's stages 0 and 3 on rank 0" 2 \
    "$tmp/t4wrap.json" gpipe 4
  tied_check tied3 "GPU stages, a table read on 3 stages, flush, 3 processes" 3 "$tmp/u3.json" flush 4
  tied_check tied3 "GPU stages, a table read on stages 0, 1 and 3, 4 stages on 2 processes (0 and 3 on rank 0), zb-h1" \
    2 "$tmp/u4wrap.json" zb-h1 4
  # AvgPipe, 2 pipelines of 2 stages on 4 processes: the elastic update reads every process's host slabs,
  # where a run leaves the weights of each stage's first replica in the process (rs0: ranks 1 and 3 hold
  # stage 0's replica 1 without replica 0; rs1: ranks 1 and 3 only stage 1's replica 1); then uploads them
  avg=(--parallel-pipelines 2 --elastic-alpha 0.25 --average-every 4)
  check "GPU stages, avgpipe, 2 pipelines x 2 stages" 4 "$tmp/p2.json" avgpipe 4 "${avg[@]}"
  check "GPU stages, avgpipe, 2 pipelines, stage 0 on ranks 0-1 and stage 1 on rank 1" 4 "$tmp/rs0.json" avgpipe 4 \
    "${avg[@]}"
  check "GPU stages, flush, 2 pipelines averaging, stage 0 on rank 0 and stage 1 on ranks 0-1" 4 "$tmp/rs1.json" flush \
    4 "${avg[@]}"
  check "GPU stages, flush, 2 pipelines x 2 stages, no averaging (their mean)" 4 "$tmp/p2.json" flush 4 \
    --parallel-pipelines 2 --elastic-alpha 0
  tied_check tied "GPU stages, tied weights, avgpipe, 2 pipelines x 2 stages" 4 "$tmp/t2.json" avgpipe 4 "${avg[@]}"
  # checkpoints of GPU stages with tied weights across processes, resumed at step 20: a reader's process
  # gets the owner's weights back (host memory), its device copy the next run's upload
  for plan in t2:2 t3:3; do
    ck=$tmp/gckt-${plan%:*} np=${plan#*:}
    common=("$tied/model.onnx" --steps 60 --plan "$tmp/${plan%:*}.json" --schedule flush --microbatches 4 --quiet
            --data "$tied/train/sgd/X.npy" --labels "$tied/train/sgd/Y.npy" --batch 8 --optimizer momentum --lr 0.05
            --clip-grad-norm 1)
    "$pdonnx" train "${common[@]}" --save "$tmp/reft.onnx" > /dev/null 2>&1
    mpi "$np" "$pdonnx" train "${common[@]}" "${mflags[@]}" --checkpoint-dir "$ck" --checkpoint-every 20 \
      --checkpoint-keep 0 --save "$tmp/ckt0.onnx" > "$tmp/log" 2>&1
    rc=$?
    rm -rf "$ck/ckpt-000000000040" "$ck/ckpt-000000000060"
    mpi "$np" "$pdonnx" train "${common[@]}" "${mflags[@]}" --resume "$ck" --checkpoint-every 20 --save "$tmp/ckt.onnx" \
      --metrics "$tmp/ckt.jsonl" > "$tmp/log2" 2>&1
    rc2=$?
    if [ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s "$tmp/reft.onnx" "$tmp/ckt0.onnx" && cmp -s "$tmp/reft.onnx" "$tmp/ckt.onnx" &&
       head -1 "$tmp/ckt.jsonl" | grep -q '^{"step": 21,' && [ "$(wc -l < "$tmp/ckt.jsonl")" = 40 ]; then
      ok "GPU stages, checkpoints, tied weights, $np processes: resumed at step 20, the CPU stages' model bitwise"
    else
      bad "GPU stages, checkpoints, tied weights on $np processes: rc $rc/$rc2: $(tail -2 "$tmp/log") $(tail -2 "$tmp/log2")"
    fi
  done
  echo "$fails failed"
  [ $fails = 0 ]
  exit
fi
check "gpipe, 2 stages" 2 "$tmp/p2.json" gpipe 4
check "flush, 2 stages" 2 "$tmp/p2.json" flush 4
check "flush, 3 stages" 3 "$tmp/p3.json" flush 4
check "zb-h1, 3 stages" 3 "$tmp/p3.json" zb-h1 4
check "pipedream, 2 stages" 2 "$tmp/p2.json" pipedream 1
check "pipedream, 3 stages, vertical sync" 3 "$tmp/p3.json" pipedream 1 --vertical-sync
check "2bw, 3 stages" 3 "$tmp/p3.json" 2bw 2
check "interleaved, 2 workers x 2 chunks" 2 "$tmp/pi.json" interleaved 4
# activation recomputation: received activations copied into each slot's kept memory (not handed over)
check "zb-h1, 3 stages, --recompute" 3 "$tmp/p3.json" zb-h1 4 --recompute
check "hybrid: stage 0 on 2 processes, stage 1 on 1, flush" 3 "$tmp/ph.json" flush 4
check "hybrid, gpipe" 3 "$tmp/ph.json" gpipe 4
check "hybrid, pipedream: stage 0's replicas take microbatches in turn, one update per round" 3 "$tmp/ph.json" \
  pipedream 1
check "4 stages on 2 processes (two each), flush, clipping" 2 "$tmp/p4on2.json" flush 4 --clip-grad-norm 0.3
check "4 stages on 2 processes, zb-h1" 2 "$tmp/p4on2.json" zb-h1 4
check "4 stages on 2 processes, pipedream" 2 "$tmp/p4on2.json" pipedream 1
check "4 stages on 2 processes, 2bw" 2 "$tmp/p4on2.json" 2bw 2
check "flush, the plan's stage_to_rank: stage 0 on rank 1, stage 1 on rank 0" 2 "$tmp/pswap.json" flush 4 \
  --trace "$tmp/swap.json"
if python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))
names = {(e['pid'], e['args']['name']) for e in ev if e.get('name') == 'thread_name'}
sys.exit(0 if names == {(0, 'stage 1'), (1, 'stage 0')} else 1)" "$tmp/swap.json"; then
  ok "stage_to_rank: rank 0 ran stage 1 and rank 1 stage 0 (the trace's tracks)"
else
  bad "stage_to_rank: the trace does not show the plan's mapping"
fi
check "hybrid, flush, gradients clipped to norm 0.5" 3 "$tmp/ph.json" flush 4 --clip-grad-norm 0.5

check "stage 0 on ranks 0-1, stage 1 on rank 1, flush, clipping" 2 "$tmp/rs0.json" flush 4 --clip-grad-norm 0.3
check "stage 0 on ranks 0-1, stage 1 on rank 1, zb-h1" 2 "$tmp/rs0.json" zb-h1 4
check "stage 0 on ranks 0-1, stage 1 on rank 1, pipedream" 2 "$tmp/rs0.json" pipedream 1
check "stage 0 on ranks 0-1, stage 1 on rank 1, 2bw" 2 "$tmp/rs0.json" 2bw 2
check "stage 0 on rank 0, stage 1 on ranks 0-1, flush, clipping" 2 "$tmp/rs1.json" flush 4 --clip-grad-norm 0.3
check "stage 0 on rank 0, stage 1 on ranks 0-1, zb-h1" 2 "$tmp/rs1.json" zb-h1 4
check "stage 0 on rank 0, stage 1 on ranks 0-1, pipedream" 2 "$tmp/rs1.json" pipedream 1
check "stage 0 on rank 0, stage 1 on ranks 0-1, 2bw" 2 "$tmp/rs1.json" 2bw 2
check "3 stages, 0 on ranks 0-1, 1 on 1, 2 on 1-2, flush, clipping" 3 "$tmp/rs3.json" flush 4 --clip-grad-norm 0.3
check "3 stages, 0 on ranks 0-1, 1 on 1, 2 on 1-2, pipedream" 3 "$tmp/rs3.json" pipedream 1
PDONNX_ALLREDUCE_OVERLAP=0 check "3 stages, 0 on ranks 0-1, 1 on 1, 2 on 1-2, gpipe, the all-reduce not overlapped" 3 \
  "$tmp/rs3.json" gpipe 4
check "stage 0 on ranks 0-1, stage 1 on rank 1, avgpipe, 2 pipelines" 4 "$tmp/rs0.json" avgpipe 4 \
  --parallel-pipelines 2 --elastic-alpha 0.25 --average-every 4
mpi 2 "$pdonnx" train "$model" --steps 5 --plan "$tmp/rs2x.json" > "$tmp/log" 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(grep -c "stage 0's replicas 0 and 1 are both on rank 1 (a stage's replicas each need a process of their own)" "$tmp/log")" = 1 ]; then
  ok "two replicas of one stage on one rank: refused once ($(grep 'both on rank' "$tmp/log"))"
else
  bad "two replicas of one stage on one rank: rc $rc: $(cat "$tmp/log")"
fi

# AvgPipe: 2 pipelines of 2 stages on 4 processes, the elastic update across the processes holding
# the same stage: the same losses (each pipeline's too) and centre as the 2 pipelines in one process
check "avgpipe, 2 pipelines x 2 stages, elastic averaging every 4 steps" 4 "$tmp/p2.json" avgpipe 4 \
  --parallel-pipelines 2 --elastic-alpha 0.25 --average-every 4
check "flush, 2 pipelines x 2 stages, no averaging (their mean)" 4 "$tmp/p2.json" flush 4 \
  --parallel-pipelines 2 --elastic-alpha 0

# tied weights (tests/fixtures/tied: the embedding table is also the output layer; tied3: read by a
# third node, a second Gather) with the table on the first, (a middle,) and the last stage: each process
# holding a reader keeps a copy, the gradients are summed across them in stage order at STEP (with three
# readers the order shows in the bits); the same losses and model as one process (plans above)
tied_check tied "tied weights, flush, 2 stages (the table on both processes)" 2 "$tmp/t2.json" flush 4
tied_check tied "tied weights, flush, 3 stages (the middle process holds no copy)" 3 "$tmp/t3.json" flush 4
tied_check tied "tied weights, gpipe, 3 stages" 3 "$tmp/t3.json" gpipe 2
tied_check tied "tied weights, zb-h1, 3 stages, adamw with weight decay" 3 "$tmp/t3.json" zb-h1 4 --optimizer adamw \
  --lr 0.01 --weight-decay 0.1
tied_check tied "tied weights, interleaved, 2 workers x 2 chunks" 2 "$tmp/ti.json" interleaved 4
tied_check tied "tied weights, 4 stages on 2 processes (two each), flush" 2 "$tmp/t4on2.json" flush 4
tied_check tied "tied weights, 4 stages on 2 processes, the table's stages 0 and 3 on rank 0" 2 "$tmp/t4wrap.json" flush 4
tied_check tied "tied weights, avgpipe, 2 pipelines x 2 stages" 4 "$tmp/t2.json" avgpipe 4 --parallel-pipelines 2 \
  --elastic-alpha 0.25 --average-every 4
tied_check tied3 "a table read on 3 stages, flush, 3 processes" 3 "$tmp/u3.json" flush 4
tied_check tied3 "a table read on stages 0, 1 and 3, 4 stages on 2 processes (0 and 3 on rank 0), flush" 2 \
  "$tmp/u4wrap.json" flush 4
tied_check tied3 "a table read on stages 0, 1 and 3, 4 stages on 2 processes (two each), zb-h1" 2 "$tmp/u4on2.json" \
  zb-h1 4
mpi 2 "$pdonnx" train "$tied/model.onnx" --steps 5 --plan "$tmp/t2.json" --schedule pipedream --microbatches 1 \
  --data "$tied/train/sgd/X.npy" --labels "$tied/train/sgd/Y.npy" --batch 8 > "$tmp/log" 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(grep -c 'tied weights' "$tmp/log")" = 1 ]; then
  ok "tied weights under pipedream across processes: refused once ($(grep 'tied weights' "$tmp/log"))"
else
  bad "tied weights under pipedream: rc $rc: $(cat "$tmp/log")"
fi

# the trace: rank 0 writes every process's tracks (pid: the rank), every F and B of both stages
mpi 2 "$pdonnx" train "$model" --steps 5 --plan "$tmp/p2.json" --schedule flush --microbatches 4 --quiet \
  --trace "$tmp/trace.json" > "$tmp/log" 2>&1
if python3 - "$tmp/trace.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))
count = {pid: sum(1 for e in ev if e.get("ph") == "X" and e["pid"] == pid and e["name"][0] in "FB") for pid in (0, 1)}
sys.exit(0 if count == {0: 40, 1: 40} else 1)
EOF
then ok "trace: one file with both processes' tracks, 20 F and 20 B each"; else bad "trace: $(cat "$tmp/log")"; fi

# a process count the plan does not fit: refused once, by rank 0
mpi 3 "$pdonnx" train "$model" --steps 5 --plan "$tmp/p2.json" > "$tmp/log" 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(grep -c 'mpirun -np 2' "$tmp/log")" = 1 ]; then
  ok "3 processes for a 2-process plan: refused once ($(grep 'mpirun -np 2' "$tmp/log"))"
else
  bad "wrong process count: rc $rc: $(cat "$tmp/log")"
fi
# a data problem every process finds: reported once
mpi 2 "$pdonnx" train "$model" --steps 5 --stages 2 --data "$tmp/missing.npy" > "$tmp/log" 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(grep -c 'missing.npy' "$tmp/log")" = 1 ]; then
  ok "a missing data file: reported once, non-zero"
else
  bad "missing data: rc $rc: $(cat "$tmp/log")"
fi
# a process that fails mid-run names its rank, stage and step: a NaN in row 900, step 29 (no shuffle)
"$npytool" set "$root/examples/digits/train_x.npy" "$tmp/nan_x.npy" $((900 * 64)) nan > /dev/null  # row 900: step 29
if [ -s "$tmp/nan_x.npy" ]; then
  start=$(date +%s)
  mpi 2 "$pdonnx" train "$model" --steps 60 --stages 2 --schedule flush --no-shuffle --data "$tmp/nan_x.npy" > "$tmp/log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc != 0 ] && grep -q "rank 1: .*stage 1, step 29" "$tmp/log" && [ $took -lt 60 ]; then
    ok "a failing process ends the job in ${took} s: $(grep 'rank 1:' "$tmp/log" | head -1)"
  else
    bad "a failing process: rc $rc after ${took} s: $(head -5 "$tmp/log")"
  fi
else
  echo "(no numpy: the failing-process check skipped)"
fi
# a failure injected mid-run (PDONNX_TEST_FAIL=STAGE:OP:MB, the library's test hook) in rank 0's
# stage, then in rank 1's, with checkpoints every step: every process exits 1 (a wrapper prints each
# exit status), one error line names the failing rank, its stage and step, and the job ends without
# MPI_Abort, in seconds (rank 0's writer waits for no part that will not come)
for f in 0:F:9 1:B:9; do
  r=${f%%:*} op=$(echo "$f" | cut -d: -f2)
  start=$(date +%s)
  PDONNX_TEST_FAIL=$f mpi 2 sh -c '"$0" "$@"; echo "exit $?"' "$pdonnx" train "$model" --steps 20 --stages 2 \
    --schedule flush --microbatches 4 --checkpoint-dir "$tmp/fck$r" --checkpoint-every 1 --save "$tmp/f.onnx" \
    --quiet > "$tmp/log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc = 0 ] && [ "$(grep -c '^exit 1$' "$tmp/log")" = 2 ] && [ "$(grep -c '^pdonnx: ' "$tmp/log")" = 1 ] &&
     grep -q "^pdonnx: rank $r: .*stage $r, step 3, $op of microbatch 9: injected failure" "$tmp/log" &&
     ! grep -qi "abort" "$tmp/log" && [ ! -e "$tmp/f.onnx" ] && [ $took -lt 60 ]; then
    ok "a failure injected on rank $r: both processes exit 1, one line: $(grep '^pdonnx:' "$tmp/log") (${took}s)"
  else
    bad "a failure injected on rank $r: rc $rc after ${took} s: $(head -5 "$tmp/log")"
  fi
done
# a checkpoint part that fails to be written mid-run (PDONNX_TEST_FAIL_CKPT=STEP:PART, the
# library's test hook): part 1 (rank 1's), then part 0 (rank 0's), at step 3 of 200. The failing
# process's writer stops its run and tells the others; rank 0's writer stops waiting for the
# part: both exit 1, one line naming the rank and the checkpoint, in seconds (it waited 600 s
# for the part before, its stage blocked behind the writer)
for f in 3:1 3:0; do
  r=${f#*:}
  start=$(date +%s)
  PDONNX_TEST_FAIL_CKPT=$f mpi 2 sh -c '"$0" "$@"; echo "exit $?"' "$pdonnx" train "$model" --steps 200 --stages 2 \
    --schedule flush --microbatches 4 --checkpoint-dir "$tmp/fckw$r" --checkpoint-every 1 --quiet > "$tmp/log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc = 0 ] && [ "$(grep -c '^exit 1$' "$tmp/log")" = 2 ] && [ "$(grep -c '^pdonnx: ' "$tmp/log")" = 1 ] &&
     grep -q "^pdonnx: rank $r: .*checkpoint at step 3: .*part $r: injected failure" "$tmp/log" && [ $took -lt 60 ]; then
    ok "checkpoint part $r failing at step 3: both processes exit 1 in ${took}s: $(grep '^pdonnx:' "$tmp/log")"
  else
    bad "checkpoint part $r failing at step 3: rc $rc after ${took} s: $(head -5 "$tmp/log")"
  fi
done
# a process killed mid-run: the job ends within seconds, non-zero
kill_rank 3 "pdonnx train $model --steps 200000" 2 "$pdonnx" train "$model" --steps 200000 --stages 2 --schedule flush --quiet
if [ -n "$victim" ] && [ $rc != 0 ] && [ $took -lt 30 ]; then
  ok "a process killed mid-run: the job ended in ${took} s with $rc"
else
  bad "a killed process: victim '$victim', rc $rc after ${took} s: $(tail -3 "$tmp/log")"
fi

# checkpoints across processes: each writes its stages' parts, rank 0 the manifest; a rank
# killed mid-run, the job resumed under mpirun: the same model as the uninterrupted in-process run
# killed_run CK PATTERN ARGS...: mpirun -np 2 pdonnx train ARGS, checkpoints into CK every 500
# steps; once the first is there (or the job is over) kills the newest process whose command line
# matches PATTERN (a rank: mpirun started first); sets killed (the job's status) and taken
killed_run() {
  local ck=$1 pat=$2 job i victim
  shift 2
  mpi 2 "$pdonnx" train "$@" --checkpoint-dir "$ck" --checkpoint-every 500 > "$tmp/log" 2>&1 &
  job=$!
  for i in $(seq 600); do
    ls "$ck" 2>/dev/null | grep -q '^ckpt-' && break
    kill -0 $job 2>/dev/null || break
    sleep 0.05
  done
  victim=$(pgrep -f "$pat" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  wait $job
  killed=$?
  taken=$(ls "$ck" 2>/dev/null | grep -c '^ckpt-')
}
ck=$tmp/ck
common=("$model" --steps 20000 --plan "$tmp/p2.json" --schedule pipedream --microbatches 1 --quiet)
"$pdonnx" train "${common[@]}" --save "$tmp/ref.onnx" > /dev/null 2>&1
killed_run "$ck" "pdonnx train $model --steps 20000" "${common[@]}"
mpi 2 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 500 --save "$tmp/ck.onnx" > "$tmp/log" 2>&1
rc=$?
if [ "$killed" != 0 ] && [ "$taken" -gt 0 ] && [ $rc = 0 ] && cmp -s "$tmp/ref.onnx" "$tmp/ck.onnx"; then
  ok "checkpoints across 2 processes: a rank killed after $taken checkpoint(s), resumed: the same model bitwise"
else
  bad "checkpoints across processes: killed $killed, $taken checkpoints, resume rc $rc: $(tail -3 "$tmp/log")"
fi

# checkpoints with several stages per process: the 4-stage plan on 2 processes (each writes its
# two stages' parts), a rank killed after a checkpoint, resumed: the model of the in-process run
ck=$tmp/ck4
common=("$model" --steps 20000 --plan "$tmp/p4on2.json" --schedule pipedream --microbatches 1 --quiet)
"$pdonnx" train "${common[@]}" --save "$tmp/ref4.onnx" > /dev/null 2>&1
killed_run "$ck" "pdonnx train $model --steps 20000 --plan $tmp/p4on2.json" "${common[@]}"
parts=$(ls "$ck"/ckpt-*/part-*.bin 2>/dev/null | wc -l)
mpi 2 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 500 --save "$tmp/ck4.onnx" > "$tmp/log" 2>&1
rc=$?
if [ "$killed" != 0 ] && [ "$taken" -gt 0 ] && [ "$parts" = $((4 * taken)) ] && [ $rc = 0 ] && cmp -s "$tmp/ref4.onnx" "$tmp/ck4.onnx"; then
  ok "checkpoints, 4 stages on 2 processes: a rank killed after $taken checkpoint(s) of 4 parts, resumed: the same model bitwise"
else
  bad "checkpoints, 4 stages on 2 processes: killed $killed, $taken checkpoints, $parts parts, resume rc $rc: $(tail -3 "$tmp/log")"
fi

# CheckFreq's auto across processes (a checkpoint folder alone): the interval is agreed, so every
# checkpoint is whole (both processes' parts of the same step in it) and the choice is printed
# once; the checkpoints change nothing, and a resume from one in the middle gives the same model
ck=$tmp/cka
common=("$model" --steps 20000 --plan "$tmp/p2.json" --schedule pipedream --microbatches 1)
mpi 2 "$pdonnx" train "${common[@]}" --checkpoint-dir "$ck" --checkpoint-keep 0 --checkpoint-overhead 0.2 \
  --save "$tmp/cka.onnx" > "$tmp/log" 2>&1
rc=$?
steps=$(python3 - "$ck" <<'EOF2'
import json, os, sys
d = sys.argv[1]
cks = sorted(x for x in os.listdir(d) if x.startswith("ckpt-"))
whole = all(len(json.load(open(f"{d}/{c}/manifest.json"))["files"]) == 2 and
            all(os.path.exists(f"{d}/{c}/part-{i}.bin") for i in range(2)) for c in cks)
print(" ".join(str(int(c[5:])) for c in cks) if whole and len(cks) >= 4 and not [x for x in os.listdir(d) if x.startswith(".")] else "torn")
EOF2
)
said=$(grep -c "^checkpoints: .* (auto, agreed by the 2 processes: every [0-9]* steps at the end)" "$tmp/log")
set -- $steps
mid=${@:$(( ($# + 1) / 2 )):1}
for s in $steps; do [ "$s" -gt "$mid" ] && rm -rf "$ck/ckpt-$(printf %012d "$s")"; done
mpi 2 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-overhead 0.2 --quiet --save "$tmp/ckr.onnx" > "$tmp/log2" 2>&1
rc2=$?
if [ $rc = 0 ] && [ "$steps" != torn ] && [ "$said" = 1 ] && cmp -s "$tmp/ref.onnx" "$tmp/cka.onnx" && [ $rc2 = 0 ] &&
   cmp -s "$tmp/ref.onnx" "$tmp/ckr.onnx"; then
  ok "auto across 2 processes: whole checkpoints at steps $steps, $(grep -o "auto, agreed[^)]*" "$tmp/log"); resumed at $mid: the same model bitwise"
else
  bad "auto across processes: rc $rc/$rc2, checkpoints '$steps', printed $said times: $(tail -2 "$tmp/log") $(tail -2 "$tmp/log2")"
fi

# a replicated stage: its replica 0's process writes the part, both processes restore it
ck=$tmp/ckh
common=("$model" --steps 60 --plan "$tmp/ph.json" --schedule flush --microbatches 4 --quiet)
"$pdonnx" train "${common[@]}" --save "$tmp/refh.onnx" > /dev/null 2>&1
mpi 3 "$pdonnx" train "${common[@]}" --checkpoint-dir "$ck" --checkpoint-every 20 --checkpoint-keep 0 > "$tmp/log" 2>&1
rc=$?
taken=$(ls "$ck" 2>/dev/null | tr '\n' ' ')
rm -rf "$ck/ckpt-000000000040" "$ck/ckpt-000000000060"
mpi 3 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 20 --save "$tmp/ckh.onnx" > "$tmp/log2" 2>&1
rc2=$?
if [ $rc = 0 ] && [ "$taken" = "ckpt-000000000020 ckpt-000000000040 ckpt-000000000060 " ] && [ $rc2 = 0 ] &&
   cmp -s "$tmp/refh.onnx" "$tmp/ckh.onnx"; then
  ok "checkpoints, hybrid (stage 0 on 2 processes), flush: resumed at step 20 on 3 processes, the same model bitwise"
else
  bad "checkpoints, hybrid: rc $rc/$rc2, '$taken': $(tail -2 "$tmp/log2")"
fi
# ... and under auto, where stage 0's replica 1 runs alone on rank 1 and joins each agreement
ck=$tmp/ckha
mpi 3 "$pdonnx" train "${common[@]}" --checkpoint-dir "$ck" --checkpoint-keep 0 --save "$tmp/ckha.onnx" > "$tmp/log" 2>&1
rc=$?
first=$(ls "$ck" 2>/dev/null | grep '^ckpt-' | head -1)
taken=$(ls "$ck" 2>/dev/null | grep -c '^ckpt-')
for d in "$ck"/ckpt-*; do [ "$(basename "$d")" = "$first" ] || rm -rf "$d"; done
mpi 3 "$pdonnx" train "${common[@]}" --resume "$ck" --save "$tmp/ckhr.onnx" > "$tmp/log2" 2>&1
rc2=$?
if [ $rc = 0 ] && [ "$taken" -ge 2 ] && [ "$first" = ckpt-000000000003 ] && [ $rc2 = 0 ] && cmp -s "$tmp/refh.onnx" "$tmp/ckha.onnx" &&
   cmp -s "$tmp/refh.onnx" "$tmp/ckhr.onnx"; then
  ok "checkpoints, hybrid, auto: $taken checkpoints on 3 processes, resumed at step 3: the same model bitwise"
else
  bad "checkpoints, hybrid, auto: rc $rc/$rc2, $taken checkpoints from '$first': $(tail -2 "$tmp/log") $(tail -2 "$tmp/log2")"
fi

# a replicated stage sharing processes: replica 0 of stage 1 writes its part on rank 1 beside
# stages 0's replica 1 (3 stages on 3 processes, 5 threads); resumed at step 20 (2bw) and a kill
for sch in flush:4 2bw:2; do
  ck=$tmp/cks-${sch%:*}
  common=("$model" --steps 60 --plan "$tmp/rs3.json" --schedule "${sch%:*}" --microbatches "${sch#*:}" --quiet)
  "$pdonnx" train "${common[@]}" --save "$tmp/refs.onnx" > /dev/null 2>&1
  mpi 3 "$pdonnx" train "${common[@]}" --checkpoint-dir "$ck" --checkpoint-every 20 --checkpoint-keep 0 > "$tmp/log" 2>&1
  rc=$?
  taken=$(ls "$ck" 2>/dev/null | tr '\n' ' ')
  parts=$(ls "$ck"/ckpt-000000000020/part-*.bin 2>/dev/null | wc -l)
  rm -rf "$ck/ckpt-000000000040" "$ck/ckpt-000000000060"
  mpi 3 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 20 --save "$tmp/cks.onnx" > "$tmp/log2" 2>&1
  rc2=$?
  if [ $rc = 0 ] && [ "$taken" = "ckpt-000000000020 ckpt-000000000040 ckpt-000000000060 " ] && [ "$parts" = 3 ] &&
     [ $rc2 = 0 ] && cmp -s "$tmp/refs.onnx" "$tmp/cks.onnx"; then
    ok "checkpoints, replicas sharing processes (3 stages, 5 threads on 3), ${sch%:*}: resumed at step 20, the same model bitwise"
  else
    bad "checkpoints, replicas sharing processes, ${sch%:*}: rc $rc/$rc2, '$taken', $parts parts: $(tail -2 "$tmp/log") $(tail -2 "$tmp/log2")"
  fi
done

# ... and stage 0 on ranks 0-1, stage 1 on rank 1: rank 1 (both threads) killed after a checkpoint,
# the job resumed: the model of the in-process run
ck=$tmp/cks0
common=("$model" --steps 5000 --plan "$tmp/rs0.json" --schedule flush --microbatches 4 --clip-grad-norm 0.3 --quiet)
"$pdonnx" train "${common[@]}" --save "$tmp/refs0.onnx" > /dev/null 2>&1
killed_run "$ck" "pdonnx train $model --steps 5000 --plan $tmp/rs0.json" "${common[@]}"
mpi 2 "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 500 --save "$tmp/cks0.onnx" > "$tmp/log" 2>&1
rc=$?
if [ "$killed" != 0 ] && [ "$taken" -gt 0 ] && [ $rc = 0 ] && cmp -s "$tmp/refs0.onnx" "$tmp/cks0.onnx"; then
  ok "checkpoints, stage 0's replica 1 beside stage 1 on rank 1: rank 1 killed after $taken checkpoint(s), resumed: the same model bitwise"
else
  bad "checkpoints, replica beside a stage: killed $killed, $taken checkpoints, resume rc $rc: $(tail -3 "$tmp/log")"
fi

# tied weights: a part holds its stage's own parameters, so the process holding only a reader of
# the table (rank 1 under t2, rank 2 under t3, whose rank 1 holds none) gets the owner's
# weights and momentum back from rank 0 on resume; resumed at step 20: the uninterrupted model
for plan in t2:2 t3:3; do
  ck=$tmp/ckt-${plan%:*} np=${plan#*:}
  common=("$tied/model.onnx" --steps 60 --plan "$tmp/${plan%:*}.json" --schedule flush --microbatches 4 --quiet
          --data "$tied/train/sgd/X.npy" --labels "$tied/train/sgd/Y.npy" --batch 8 --optimizer momentum --lr 0.05
          --clip-grad-norm 1)
  "$pdonnx" train "${common[@]}" --save "$tmp/reft.onnx" > /dev/null 2>&1
  mpi "$np" "$pdonnx" train "${common[@]}" --checkpoint-dir "$ck" --checkpoint-every 20 --checkpoint-keep 0 > "$tmp/log" 2>&1
  rc=$?
  taken=$(ls "$ck" 2>/dev/null | tr '\n' ' ')
  rm -rf "$ck/ckpt-000000000040" "$ck/ckpt-000000000060"
  mpi "$np" "$pdonnx" train "${common[@]}" --resume "$ck" --checkpoint-every 20 --save "$tmp/ckt.onnx" > "$tmp/log2" 2>&1
  rc2=$?
  if [ $rc = 0 ] && [ "$taken" = "ckpt-000000000020 ckpt-000000000040 ckpt-000000000060 " ] && [ $rc2 = 0 ] &&
     cmp -s "$tmp/reft.onnx" "$tmp/ckt.onnx"; then
    ok "checkpoints, tied weights, $np stages on $np processes, momentum: resumed at step 20, the same model bitwise"
  else
    bad "checkpoints, tied weights on $np processes: rc $rc/$rc2, '$taken': $(tail -2 "$tmp/log") $(tail -2 "$tmp/log2")"
  fi
done

# --val under mpirun with per-stage loading: rank 0 would validate holding its stages' weights only
# (it crashed on another stage's missing weight): refused once, before training; gathered
# (PDONNX_LAZY_WEIGHTS=0) it validates
if [ -x "$gen_mlp" ]; then
  sm=$tmp/sm
  mkdir -p "$sm" && "$gen_mlp" "$sm" 3 64 64 > /dev/null
  vargs=("$sm/mlp.onnx" --data "$sm/x.npy" --labels "$sm/y.npy" --val "$sm/x.npy" "$sm/y.npy" --steps 5 --stages 2 --batch 8
         --microbatches 2)
  mpi 2 "$pdonnx" train "${vargs[@]}" > "$tmp/log" 2>&1
  rc=$?
  PDONNX_LAZY_WEIGHTS=0 mpi 2 "$pdonnx" train "${vargs[@]}" > "$tmp/log2" 2>&1
  rc2=$?
  if [ $rc != 0 ] && [ "$(grep -c -- '--val under mpirun with per-stage loading' "$tmp/log")" = 1 ] && ! grep -q '^step' "$tmp/log" &&
     [ $rc2 = 0 ] && grep -q '^validation: loss' "$tmp/log2"; then
    ok "--val with per-stage loading under mpirun: refused once before training; gathered, it validates"
  else
    bad "--val with per-stage loading: rc $rc/$rc2: $(head -3 "$tmp/log") / $(tail -2 "$tmp/log2")"
  fi
fi

# per-stage loading (docs/DISTRIBUTED.md): a 100 MB MLP whose weights are external data (made here by
# gen_mlp); each of two processes reads and keeps only its stage's weights, gradients and Adam state:
# its peak resident memory is under 65% of one process training the same plan alone (one process:
# about 500 MB; each of two: about 270 MB, 615 MB before). The same losses as one process, and the
# model saved as two stage files beside a small model file gives the one-process model's outputs
# bitwise (same weights)
if [ -x "$gen_mlp" ] && [ -x "$peakrss" ]; then
  big=$tmp/big
  mkdir -p "$big/out"
  "$gen_mlp" "$big" 6 2048 64 && "$pdonnx" plan "$big/mlp.onnx" --workers 2 --straight --algo uniform --batch 4 \
    -o "$big/p2.json" > /dev/null 2>&1
  python3 - "$big/p2.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
n = p["nodes"]
p["stages"][0]["nodes"], p["stages"][1]["nodes"] = n[:6], n[6:]  # 3 of the 6 wide layers each
json.dump(p, open(sys.argv[1], "w"))
EOF
  base=("$big/mlp.onnx" --data "$big/x.npy" --labels "$big/y.npy" --steps 3 --batch 8 --microbatches 2 --optimizer adam
        --quiet)
  common=("${base[@]}" --plan "$big/p2.json")
  "$peakrss" "$big/one" "$pdonnx" train "${common[@]}" --save "$big/one.onnx" --metrics "$big/one.jsonl" > "$tmp/log" 2>&1
  rc1=$?
  mpi 2 "$peakrss" "$big/two" "$pdonnx" train "${common[@]}" --save "$big/out/two.onnx" --metrics "$big/two.jsonl" > "$tmp/log2" 2>&1
  rc2=$?
  "$pdonnx" run "$big/one.onnx" --batch 64 --input x="$big/x.npy" --output y="$big/y1.npy" > /dev/null 2>&1
  "$pdonnx" run "$big/out/two.onnx" --batch 64 --input x="$big/x.npy" --output y="$big/y2.npy" > /dev/null 2>&1
  "$pdonnx" run "$big/mlp.onnx" --batch 64 --input x="$big/x.npy" --output y="$big/y0.npy" > /dev/null 2>&1
  one=$(cat "$big/one.0" 2>/dev/null || echo 0) r0=$(cat "$big/two.0" 2>/dev/null || echo 0) r1=$(cat "$big/two.1" 2>/dev/null || echo 0)
  msize=$(wc -c < "$big/out/two.onnx" 2>/dev/null || echo 0)
  if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$one" -gt 0 ] && [ "$r0" -gt 0 ] && [ "$r1" -gt 0 ] &&
     [ $((r0 * 100)) -lt $((one * 65)) ] && [ $((r1 * 100)) -lt $((one * 65)) ]; then
    ok "per-stage loading: 2 processes peak at $((r0 / 1024)) and $((r1 / 1024)) MB, one process at $((one / 1024)) MB (under 65%)"
  else
    bad "per-stage loading: rc $rc1/$rc2, peaks $r0 $r1 KB against one process's $one KB: $(tail -2 "$tmp/log2")"
  fi
  if [ "$(cols "$big/one.jsonl")" = "$(cols "$big/two.jsonl")" ] && [ -s "$big/two.jsonl" ] && cmp -s "$big/y1.npy" "$big/y2.npy" &&
     ! cmp -s "$big/y0.npy" "$big/y1.npy" && [ -s "$big/out/two.onnx.stage0.bin" ] && [ -s "$big/out/two.onnx.stage1.bin" ] &&
     [ "$msize" -gt 0 ] && [ "$msize" -lt 100000 ]; then
    ok "per-stage loading: the losses of one process; the model saved as 2 stage files and a $msize-byte model runs as one process's"
  else
    bad "per-stage loading: losses or saved model differ from one process (model $msize bytes)"
    diff <(cols "$big/one.jsonl") <(cols "$big/two.jsonl") | head -4
  fi
  # --stages 2: rank 0 plans from a profile measured in 4 pieces (it profiled the whole model before,
  # peaking at 1.4 times one process); the cut is the planner's (timed), so each process is held
  # under 90% of one process, not 65%; the losses do not depend on the cut
  mpi 2 "$peakrss" "$big/st" "$pdonnx" train "${base[@]}" --stages 2 --metrics "$big/st.jsonl" > "$tmp/log" 2>&1
  rc=$?
  s0=$(cat "$big/st.0" 2>/dev/null || echo 0) s1=$(cat "$big/st.1" 2>/dev/null || echo 0)
  if [ $rc = 0 ] && [ "$s0" -gt 0 ] && [ "$s1" -gt 0 ] && [ $((s0 * 100)) -lt $((one * 90)) ] &&
     [ $((s1 * 100)) -lt $((one * 90)) ] && [ "$(cols "$big/one.jsonl")" = "$(cols "$big/st.jsonl")" ]; then
    ok "per-stage loading, --stages 2 (profiled in pieces): peaks $((s0 / 1024)) and $((s1 / 1024)) MB, the same losses"
  else
    bad "per-stage loading, --stages 2: rc $rc, peaks $s0 $s1 KB against $one KB: $(tail -2 "$tmp/log")"
  fi
  rm -rf "$big"
fi

echo "$fails failed"
[ $fails = 0 ]
