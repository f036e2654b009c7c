#!/usr/bin/env bash
# test_mpi_api.sh [--device cuda] TEST_MPI_API EXAMPLE_MPI PDONNX SOURCE_ROOT GEN_MLP - the public
# trainer under mpirun (pd_trainer_options.mpi): a program built against
# pipedream.h, run by `mpirun -np 2` (and 3 for a hybrid plan), prints the
# same per-step results (exactly) and saves the same model (bitwise) as the
# same program in one process, under every schedule; an argument error on
# one process is an error on every process, naming it, and the job goes on;
# a failure in the middle of a run is an error on every process (no hang),
# a failure injected on rank 0 or rank 1 too, and a checkpoint part that
# fails to be written, each process then exiting 1 without MPI_Abort;
# a plan for another process count is refused on every process;
# checkpoints written across the processes and a resume from one; a
# replicated stage sharing processes with another stage likewise.
# examples/embed/mpi.c likewise. Skipped (77) without mpirun or MPI. With
# --device cuda (test mpi-api-devsim, on the simulated device) only GPU stages
# under mpirun against the CPU stages in one process: plain, replicated and
# shared-process plans, checkpoints and resumes, a NaN mid-run.
set -u
dev=
if [ "${1:-}" = --device ]; then dev=$2; shift 2; fi
prog=$1
example=$2
pdonnx=$3
root=$4
gen_mlp=${5:-}
. "$(dirname "$0")/common.sh"
mpi_setup
# mpi, on GPU stages with --device (the in-process runs stay on the CPU)
mrun() { if [ -n "$dev" ]; then PD_TEST_DEVICE=$dev mpi "$@"; else mpi "$@"; fi; }
# same_steps A B: the same step lines, bitwise (the gradient norm too: GPU stages sum its squares in the CPU's blocks)
same_steps() { cmp -s "$1" "$2"; }
model=$root/examples/digits_mlp.onnx

"$pdonnx" plan "$model" --workers 2 --straight --batch 8 -o "$tmp/p2.json" > /dev/null
"$pdonnx" plan "$model" --workers 3 --straight --algo uniform --batch 8 -o "$tmp/p3.json" > /dev/null
"$pdonnx" plan "$model" --workers 4 --straight --algo uniform --batch 8 -o "$tmp/p4.json" > /dev/null
python3 - "$tmp/p4.json" "$tmp/p4on2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for s, r in zip(p["stages"], [0, 0, 1, 1]):
    s["ranks"] = [r]  # two stages per process
json.dump(p, open(sys.argv[2], "w"))
PY
python3 - "$tmp/p2.json" "$tmp/ph.json" "$tmp/rs0.json" "$tmp/rs1.json" <<'PY'
import json, sys
for out, reps, ranks in ((sys.argv[2], [2, 1], [[0, 1], [2]]),  # hybrid: a process per stage replica
                         (sys.argv[3], [2, 1], [[0, 1], [1]]),  # stage 0's replica 1 beside stage 1 on rank 1
                         (sys.argv[4], [1, 2], [[0], [0, 1]])):  # stage 1's replica 0 beside stage 0 on rank 0
    p = json.load(open(sys.argv[1]))
    for s, n, r in zip(p["stages"], reps, ranks):
        s["replicas"], s["ranks"] = n, r
    p["workers"] = sum(reps)
    json.dump(p, open(out, "w"))
PY

mpi 2 "$prog" "$model" "$tmp/p2.json" flush 4 2 "$tmp/x.onnx" ok > "$tmp/log" 2>&1
rc=$?
if [ $rc = 77 ] || grep -q "without MPI" "$tmp/log"; then echo "built without MPI: skipped"; exit 77; fi
[ $rc = 0 ] || bad "a first 2-process run: $(tail -3 "$tmp/log")"

check() { # name np plan schedule microbatches [mode]
  local name=$1 np=$2 plan=$3 sch=$4 mb=$5 mode=${6:-ok}
  "$prog" "$model" "$plan" "$sch" "$mb" 30 "$tmp/in.onnx" ok > "$tmp/in.txt" 2>&1 || { bad "$name: in one process: $(tail -3 "$tmp/in.txt")"; return; }
  mrun "$np" "$prog" "$model" "$plan" "$sch" "$mb" 30 "$tmp/mpi.onnx" "$mode" > "$tmp/mpi.txt" 2>&1 || { bad "$name: $np processes: $(tail -3 "$tmp/mpi.txt")"; return; }
  if cmp -s "$tmp/in.onnx" "$tmp/mpi.onnx" && same_steps <(grep ^step "$tmp/in.txt") <(grep ^step "$tmp/mpi.txt") &&
     [ "$(grep -c ^step "$tmp/mpi.txt")" = 30 ]; then
    ok "$name: $np processes through the API equal one process (30 steps' results and the model, bitwise)"
  else
    bad "$name: $np processes differ from one process"
    diff <(grep ^step "$tmp/in.txt") <(grep ^step "$tmp/mpi.txt") | head -4
  fi
}
nck=0
ckwhole() { # dir plan: the steps of dir's checkpoints, each with all the plan's parts ("torn" if one is not)
  local parts; parts=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['stages']))" "$2")
  python3 - "$1" "$parts" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
cks = sorted(x for x in os.listdir(d) if x.startswith("ckpt-"))
good = [c for c in cks if len(json.load(open(f"{d}/{c}/manifest.json"))["files"]) == n
        and all(os.path.getsize(f"{d}/{c}/part-{i}.bin") > 0 for i in range(n))]
print(" ".join(c[5:].lstrip("0") for c in good) if len(good) == len(cks) and not [x for x in os.listdir(d) if x.startswith(".")] else "torn")
PY
}
ckcheck() { # name np plan schedule microbatches
  local name=$1 np=$2 plan=$3 sch=$4 mb=$5 ck=$tmp/ck-$((++nck))
  "$prog" "$model" "$plan" "$sch" "$mb" 30 "$tmp/in.onnx" ok > "$tmp/in.txt" 2>&1 || { bad "$name: in one process: $(tail -3 "$tmp/in.txt")"; return; }
  mrun "$np" "$prog" "$model" "$plan" "$sch" "$mb" 30 "$tmp/ck.onnx" ckpt "$ck" > "$tmp/ck.txt" 2>&1 || { bad "$name: with checkpoints: $(tail -3 "$tmp/ck.txt")"; return; }
  local parts; parts=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['stages']))" "$plan")
  local whole; whole=$(ckwhole "$ck" "$plan")
  rm -rf "$ck/ckpt-000000000020" "$ck/ckpt-000000000030"
  mrun "$np" "$prog" "$model" "$plan" "$sch" "$mb" 30 "$tmp/re.onnx" resume "$ck" > "$tmp/re.txt" 2>&1 || { bad "$name: resumed: $(tail -3 "$tmp/re.txt")"; return; }
  if [ "$whole" = "10 20 30" ] && cmp -s "$tmp/in.onnx" "$tmp/ck.onnx" && cmp -s "$tmp/in.onnx" "$tmp/re.onnx" &&
     grep -q "^resumed at step 10 of a call of 30 steps from 0" "$tmp/re.txt" &&
     same_steps <(grep ^step "$tmp/in.txt" | tail -20) <(grep ^step "$tmp/re.txt") && [ "$(grep -c ^step "$tmp/re.txt")" = 20 ]; then
    ok "$name: checkpoints at steps $whole with all $parts parts; resumed at step 10: steps 11-30 and the model equal the uninterrupted run's"
  else
    bad "$name: checkpoints '$whole', resume: $(grep -v ^step "$tmp/re.txt" | head -3)"
  fi
}
# --device cuda: the runs under mpirun on GPU stages (PD_TEST_DEVICE), against one process on the CPU
if [ -n "$dev" ]; then
  if ! PD_TEST_DEVICE=$dev "$prog" "$model" "$tmp/p2.json" flush 4 1 "$tmp/x.onnx" ok > "$tmp/log" 2>&1; then
    echo "no $dev device here ($(head -c 200 "$tmp/log")): skipped"; exit 77
  fi
  check "GPU stages, flush, 2 stages" 2 "$tmp/p2.json" flush 4
  check "GPU stages, pipedream, 2 stages" 2 "$tmp/p2.json" pipedream 1
  check "GPU stages, hybrid (stage 0 on 2 processes), gpipe" 3 "$tmp/ph.json" gpipe 4
  check "GPU stages, 4 stages on 2 processes (two each), flush" 2 "$tmp/p4on2.json" flush 4
  check "GPU stages, stage 0 on ranks 0-1, stage 1 on rank 1, zb-h1" 2 "$tmp/rs0.json" zb-h1 4
  ckcheck "GPU stages, checkpoints, flush, 2 stages on 2 processes" 2 "$tmp/p2.json" flush 4
  ckcheck "GPU stages, checkpoints, pipedream, 4 stages on 2 processes" 2 "$tmp/p4on2.json" pipedream 1
  ckcheck "GPU stages, checkpoints, hybrid (stage 0's replicas on 2 processes), flush" 3 "$tmp/ph.json" flush 4
  # a NaN loss on the last stage mid-run: an error on both processes, the other waiting on MPI for it
  for p in p2:1 p4on2:3; do
    mrun 2 "$prog" "$model" "$tmp/${p%:*}.json" flush 4 6 "$tmp/n.onnx" nan > "$tmp/nan.txt" 2>&1
    rc=$?
    if [ $rc != 0 ] && [ $rc != 124 ] && [ "$(grep -c "^rank [01]: error: .*stage ${p#*:}, step 3.*nan" "$tmp/nan.txt")" = 2 ]; then
      ok "GPU stages (${p%:*}): a NaN loss on stage ${p#*:} at step 3 is an error on both processes naming it (exit $rc)"
    else
      bad "GPU stages (${p%:*}), a failure mid-run (exit $rc): $(grep -v '^step' "$tmp/nan.txt" | head -5)"
    fi
  done
  [ $fails = 0 ] || { echo "$fails failed"; exit 1; }
  echo "all passed"
  exit 0
fi
check "flush, 2 stages" 2 "$tmp/p2.json" flush 4
check "gpipe, 2 stages" 2 "$tmp/p2.json" gpipe 4
check "zb-h1, 3 stages" 3 "$tmp/p3.json" zb-h1 4
check "pipedream, 2 stages" 2 "$tmp/p2.json" pipedream 1
check "2bw, 3 stages" 3 "$tmp/p3.json" 2bw 2
check "hybrid (stage 0 on 2 processes), flush" 3 "$tmp/ph.json" flush 4
check "hybrid, gpipe" 3 "$tmp/ph.json" gpipe 4
check "hybrid, zb-h1" 3 "$tmp/ph.json" zb-h1 4
PDONNX_ALLREDUCE_OVERLAP=0 check "hybrid, flush, the all-reduce not overlapped" 3 "$tmp/ph.json" flush 4
check "4 stages on 2 processes (two each), flush" 2 "$tmp/p4on2.json" flush 4
check "stage 0 on ranks 0-1, stage 1 on rank 1, flush" 2 "$tmp/rs0.json" flush 4
check "stage 0 on rank 0, stage 1 (the loss) on ranks 0-1, flush" 2 "$tmp/rs1.json" flush 4
check "4 stages on 2 processes, gpipe" 2 "$tmp/p4on2.json" gpipe 4
check "flush, rank 1 passes NULL labels once" 2 "$tmp/p2.json" flush 4 bad-arg
if [ "$(grep -c "^rank [01]: error: rank 1: pd_trainer_train: labels is NULL" "$tmp/mpi.txt")" = 2 ] &&
   [ "$(grep -c "^rank [01]: error: rank 0: pd_trainer_train: steps is 30 here but not on every process" "$tmp/mpi.txt")" = 2 ]; then
  ok "an argument error on rank 1, and steps that differ, are errors on both processes, naming a rank; training goes on"
else
  bad "an argument error on rank 1: $(grep error "$tmp/mpi.txt" | head -3)"
fi

# checkpoints through the API under MPI: each process writes its stages' parts, rank 0 the
# manifest; the checkpoints change nothing; the run after a crash (the checkpoints after
# step 10 lost) resumes from step 10, repeats the call and ends with the uninterrupted model
ckcheck "checkpoints, flush, 2 stages on 2 processes" 2 "$tmp/p2.json" flush 4
ckcheck "checkpoints, pipedream, 4 stages on 2 processes" 2 "$tmp/p4on2.json" pipedream 1
ckcheck "checkpoints, hybrid (stage 0's replicas on 2 processes), flush" 3 "$tmp/ph.json" flush 4
ckcheck "checkpoints, stage 0 on ranks 0-1, stage 1 on rank 1, flush" 2 "$tmp/rs0.json" flush 4

# PD_CHECKPOINT_AUTO under MPI: the processes agree on CheckFreq's interval, so every
# checkpoint holds both processes' parts: the first 3 steps in, the last at the end;
# the checkpoints change nothing
ck=$tmp/ck-auto
"$prog" "$model" "$tmp/p2.json" flush 4 30 "$tmp/in.onnx" ok > "$tmp/in.txt" 2>&1 &&
  mpi 2 "$prog" "$model" "$tmp/p2.json" flush 4 30 "$tmp/ca.onnx" ckpt-auto "$ck" > "$tmp/ca.txt" 2>&1
rc=$?
whole=$( [ $rc = 0 ] && ckwhole "$ck" "$tmp/p2.json")
if [ "${whole%% *}" != 3 ] || [ "${whole##* }" != 30 ]; then
  bad "auto checkpoints under MPI: rc $rc, checkpoints '$whole': $(tail -3 "$tmp/ca.txt")"
elif ! cmp -s "$tmp/in.onnx" "$tmp/ca.onnx"; then
  bad "auto checkpoints under MPI: the model differs from the run without"
else
  ok "auto checkpoints, flush, 2 stages on 2 processes: steps $whole, each with both parts; the model equals the run without"
fi

# a NaN loss on the last stage (rank 1) in the middle of the run: both return
start=$(date +%s)
mpi 2 "$prog" "$model" "$tmp/p2.json" flush 4 6 "$tmp/n.onnx" nan > "$tmp/nan.txt" 2>&1
rc=$?
took=$(($(date +%s) - start))
if [ $rc != 0 ] && [ $rc != 124 ] && [ "$(grep -c "^rank [01]: error: .*stage 1, step 3.*nan" "$tmp/nan.txt")" = 2 ]; then
  ok "a NaN loss on rank 1 at step 3 is an error on both processes naming stage 1 and step 3 (${took}s, exit $rc)"
else
  bad "a failure mid-run (exit $rc, ${took}s): $(grep -v '^step' "$tmp/nan.txt" | head -5)"
fi

# the same with two stages per process: the other stage of rank 1 and both of rank 0 stop
mpi 2 "$prog" "$model" "$tmp/p4on2.json" flush 4 6 "$tmp/n.onnx" nan > "$tmp/nan.txt" 2>&1
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] && [ "$(grep -c "^rank [01]: error: rank 1: .*stage 3, step 3.*nan" "$tmp/nan.txt")" = 2 ]; then
  ok "two stages per process: a NaN loss on stage 3 (rank 1) is an error on both processes naming it (exit $rc)"
else
  bad "two stages per process, a failure mid-run (exit $rc): $(grep -v '^step' "$tmp/nan.txt" | head -5)"
fi

# a failure injected mid-run (PDONNX_TEST_FAIL=STAGE:OP:MB) in rank 0's stage, then in rank 1's:
# every process's pd_trainer_train returns the same error, naming the failing rank, its stage and
# step; then each destroys its trainer, finalizes and exits 1 (a wrapper prints each exit status):
# the job ends cleanly, without MPI_Abort, in seconds
for f in 0:F:9 1:B:9; do
  r=${f%%:*} op=$(echo "$f" | cut -d: -f2)
  start=$(date +%s)
  PDONNX_TEST_FAIL=$f mpi 2 sh -c '"$0" "$@"; echo "exit $?"' "$prog" "$model" "$tmp/p2.json" flush 4 6 \
    "$tmp/f.onnx" fail > "$tmp/fail.txt" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc = 0 ] && [ "$(grep -c '^exit 1$' "$tmp/fail.txt")" = 2 ] &&
     [ "$(grep -c "^rank [01]: error: rank $r: .*stage $r, step 3, $op of microbatch 9: injected failure" "$tmp/fail.txt")" = 2 ] &&
     ! grep -qi "abort" "$tmp/fail.txt" && [ $took -lt 60 ]; then
    ok "a failure injected on rank $r ($op of microbatch 9): the same error on both processes, both exit 1 (${took}s)"
  else
    bad "a failure injected on rank $r (exit $rc, ${took}s): $(grep -v '^step' "$tmp/fail.txt" | head -5)"
  fi
done

# a checkpoint part failing to be written mid-run (PDONNX_TEST_FAIL_CKPT=STEP:PART): rank 1's part
# of the checkpoint at step 10 of 30: its writer stops the run and tells rank 0, whose writer stops
# waiting for the part: the same error on both processes, both exit 1, in seconds
start=$(date +%s)
PDONNX_TEST_FAIL_CKPT=10:1 mpi 2 sh -c '"$0" "$@"; echo "exit $?"' "$prog" "$model" "$tmp/p2.json" flush 4 30 \
  "$tmp/f.onnx" ckpt "$tmp/fck" > "$tmp/fail.txt" 2>&1
rc=$?
took=$(($(date +%s) - start))
if [ $rc = 0 ] && [ "$(grep -c '^exit 1$' "$tmp/fail.txt")" = 2 ] &&
   [ "$(grep -c "^rank [01]: error: rank 1: .*checkpoint at step 10: .*part 1: injected failure" "$tmp/fail.txt")" = 2 ] &&
   [ $took -lt 60 ]; then
  ok "rank 1's checkpoint part failing at step 10: the same error on both processes, both exit 1 (${took}s)"
else
  bad "rank 1's checkpoint part failing (exit $rc, ${took}s): $(grep -v '^step' "$tmp/fail.txt" | head -5)"
fi

# a plan for 2 processes on 3: refused on every process, which end cleanly
mpi 3 "$prog" "$model" "$tmp/p2.json" flush 4 2 "$tmp/x.onnx" ok > "$tmp/np.txt" 2>&1
rc=$?
if [ $rc = 1 ] && [ "$(grep -c "^rank [012]: error: .*runs as 2 processes.*not 3" "$tmp/np.txt")" = 3 ]; then
  ok "a 2-process plan on 3 processes is refused on each"
else
  bad "a 2-process plan on 3 processes (exit $rc): $(head -5 "$tmp/np.txt")"
fi

# the example: under mpirun and in one process, the same output and model
"$example" "$model" "$tmp/p2.json" "$tmp/e1.onnx" > "$tmp/e1.txt" 2> "$tmp/e1.err" || bad "examples/embed/mpi.c in one process: $(cat "$tmp/e1.err")"
mpi 2 "$example" "$model" "$tmp/p2.json" "$tmp/e2.onnx" > "$tmp/e2.txt" 2> "$tmp/e2.err" || bad "examples/embed/mpi.c under mpirun: $(tail -3 "$tmp/e2.err")"
if cmp -s "$tmp/e1.txt" "$tmp/e2.txt" && cmp -s "$tmp/e1.onnx" "$tmp/e2.onnx" && [ "$(grep -c ^step "$tmp/e2.txt")" = 20 ]; then
  ok "examples/embed/mpi.c: mpirun -np 2 equals one process (20 steps, the model)"
else
  bad "examples/embed/mpi.c: mpirun -np 2 differs from one process"
fi

# per-stage loading through the API: an external-data MLP loaded with lazy_weights; 2 processes hold
# their stages' weights only, pd_trainer_save writes each stage's file and the model: the same 30
# steps' results as one process, and the saved model runs to the one-process model's outputs
# bitwise; pd_graph_save of such a graph afterwards is refused, naming a weight trained elsewhere,
# and so is pd_session_create (it read a NULL weight: a crash, pdonnx train --val on rank 0)
if [ -x "$gen_mlp" ]; then
  lz=$tmp/lazy
  mkdir -p "$lz/one" "$lz/two"
  "$gen_mlp" "$lz" 3 64 64 > /dev/null && "$pdonnx" plan "$lz/mlp.onnx" --workers 2 --straight --algo uniform --batch 8 \
    -o "$lz/p2.json" > /dev/null 2>&1
  "$prog" "$lz/mlp.onnx" "$lz/p2.json" flush 4 30 "$lz/one/m.onnx" lazy > "$lz/one.txt" 2>&1
  rc1=$?
  mpi 2 "$prog" "$lz/mlp.onnx" "$lz/p2.json" flush 4 30 "$lz/two/m.onnx" lazy > "$lz/two.txt" 2>&1
  rc2=$?
  "$pdonnx" run "$lz/one/m.onnx" --batch 64 --input x="$lz/x.npy" --output y="$lz/y1.npy" > /dev/null 2>&1
  "$pdonnx" run "$lz/two/m.onnx" --batch 64 --input x="$lz/x.npy" --output y="$lz/y2.npy" > /dev/null 2>&1
  "$pdonnx" run "$lz/mlp.onnx" --batch 64 --input x="$lz/x.npy" --output y="$lz/y0.npy" > /dev/null 2>&1
  if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(grep -c '^step' "$lz/one.txt")" = 30 ] &&
     [ "$(grep '^step' "$lz/one.txt")" = "$(grep '^step' "$lz/two.txt")" ] && cmp -s "$lz/y1.npy" "$lz/y2.npy" &&
     ! cmp -s "$lz/y0.npy" "$lz/y1.npy" && [ -s "$lz/two/m.onnx.stage0.bin" ] && [ -s "$lz/two/m.onnx.stage1.bin" ] &&
     grep -q "rank 0: refused: .*initializer '.*' was trained by another process" "$lz/two.txt" &&
     grep -q "rank 0: session refused: .*initializer '.*' was trained by another process" "$lz/two.txt"; then
    ok "per-stage loading through the API: 2 processes equal one (30 steps, the saved model's outputs bitwise)"
  else
    bad "per-stage loading through the API: rc $rc1/$rc2: $(grep -v '^step' "$lz/two.txt" | head -3)"
  fi
fi

[ $fails = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
