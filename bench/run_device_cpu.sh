#!/usr/bin/env bash
# run_device_cpu.sh - issue 23's CPU measurements in one device call, on the
# device machine's CPUs (quiet, one thread per core), from the pack
# bench/cpu_pack.sh makes: the realistic table at 1 and 2 threads, each run
# pinned to CPUs of its own; the GPT's and the ViT's profiles at 1 and 2
# threads side by side, the op types that gain least first; the GPT's and
# the ViT's 2-thread step at three lengths of the idle workers' spin; the
# GPT's pipeline on two cores. Each part is bounded so the whole ends within
# SECONDS (default 420); each writes its table to OUTDIR as it ends.
#
#   bench/cpu_pack.sh                                   # here; carry build-cpu-pack-xz
#   tar xJf build-cpu-pack-xz/pack.tar.xz && bench/run_device_cpu.sh build-cpu-pack "$OUT"    # there
#
# Python: the machine's python3 with PyTorch (PD_BENCH_PYTHON to change); ITERS
# and REPEATS: run_realistic.sh's (10, 3); MODELS its rows.
set -u
cd "$(dirname "$0")/.."
pack=${1:?usage: bench/run_device_cpu.sh PACK OUTDIR [SECONDS]} outdir=${2:?OUTDIR} budget=${3:-420}
mkdir -p "$outdir"
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
log() { echo "[$(($(date +%s) - t0)) s] $*"; }
export PD_BENCH_PYTHON=${PD_BENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$(cd "$pack" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# one CPU of each physical core, the first eight
cpus=$(for c in /sys/devices/system/cpu/cpu[0-9]*; do
         s=$(cat "$c/topology/thread_siblings_list"); echo "${s%%[,-]*}"; done | sort -un | head -8 | tr '\n' ' ')
export PD_BENCH_CPUS=$cpus
set -- $cpus
two=$1,${2:-$1}
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; log "CPUs, one per core: $cpus"
OPENBLAS_VERBOSE=2 "$pack/pdonnx" --help 2>&1 >/dev/null | grep -E 'Core|OPENBLAS' | tail -2

timeout "$(( $(left) * 55 / 100 ))" bench/run_realistic.sh "$pack" "${ITERS:-10}" "${REPEATS:-3}" 2>&1 | tee "$outdir/realistic.md"
log realistic
models=$pack/bench-realistic
batch() { "$PD_BENCH_PYTHON" -c "import sys; sys.path.insert(0, 'bench'); import torch_realistic as t; print(t.BATCH['$1'])"; }
# FIELD of bench_train's JSON line on stdin
field() { "$PD_BENCH_PYTHON" -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
# The idle workers' spin at 2 threads: the count pdonnx measures for this CPU
# (tools/program_env.h), ten and a hundred times it (the transformers' many
# parallel regions wait on a sleeping worker's wake-up where it is too short)
spin=$(taskset -c "$two" "$pack/bench/bench_train" "$models/mlp/model.onnx" "$models/mlp/x.npy" --batch "$(batch mlp)" \
         --threads 2 --iters 1 --warmup 0 | field gomp_spincount)
log "GOMP_SPINCOUNT measured here: $spin"
{ echo "| model | GOMP_SPINCOUNT | 2-thread ms/step, two runs |"; echo "|---|---|---|"; } > "$outdir/spin.md"
for m in gpt vit; do
  b=$(batch "$m")
  for c in "$spin" "$((spin * 10))" "$((spin * 100))"; do
    [ "$(left)" -gt 150 ] || break
    r=$(for i in 1 2; do GOMP_SPINCOUNT=$c taskset -c "$two" "$pack/bench/bench_train" "$models/$m/model.onnx" \
          "$models/$m/x.npy" --batch "$b" --threads 2 --iters 6 --warmup 2 --optimizer momentum |
          field ms_per_step | xargs printf '%.1f '; done)
    echo "| $m | $c | $r|" | tee -a "$outdir/spin.md"
  done
done
log spin
for m in gpt vit; do
  [ "$(left)" -gt 40 ] || break
  b=$(batch "$m")
  [ -f "$models/$m/model.onnx" ] || continue
  for t in 1 2; do
    pin=$1; [ "$t" = 2 ] && pin=$two
    timeout "$(( $(left) / 4 ))" taskset -c "$pin" "$pack/pdonnx" profile "$models/$m/model.onnx" --batch "$b" \
      --threads "$t" --optimizer momentum --quiet -o "$outdir/$m-$t.json"
  done
  [ -f "$outdir/$m-2.json" ] && python3 bench/profile_top.py "$outdir/$m-1.json" "$outdir/$m-2.json" 12 \
    | tee "$outdir/$m-profile.txt"
  log "profile $m"
done
g=$models/gpt
if [ -f "$g/model.onnx" ] && [ "$(left)" -gt 60 ]; then
  "$PD_BENCH_PYTHON" -c "import numpy as np; r = np.random.default_rng(0)
for f in ('X', 'Y'): np.save('$g/%s.npy' % f, r.integers(0, 1024, (1024, 128)).astype(np.int64))"
  REPEATS=1 timeout "$(left)" taskset -c "$two" bench/run_pipeline.sh "$pack" "$g" 8 40 2>&1 | tee "$outdir/pipeline.md"
  log pipeline
fi
