#!/usr/bin/env bash
# stage_memory.sh - peak resident memory per process against stage count
# (per-stage loading, docs/DISTRIBUTED.md): a wide MLP whose weights are
# external data (tests/gen_mlp), trained by one process, then by 2 and 4
# processes (mpirun, one stage each, layers split evenly), with per-stage
# loading on (the default under mpirun) and off (PDONNX_LAZY_WEIGHTS=0: every
# process loads and gathers the whole model, as before). Prints a Markdown
# table for docs/PERF.md. Peaks from tests/peakrss (ru_maxrss, mapped data
# files included).
#
#   bench/stage_memory.sh [BUILD_DIR] [LAYERS] [WIDTH] [OPTIMIZER]
# Default: 8 hidden layers of 2048 (134 MB of float32 weights), adam.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} layers=${2:-8} width=${3:-2048} opt=${4:-adam}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
"$build/tests/gen_mlp" "$tmp" "$layers" "$width" 64
mb=$(($(stat -c %s "$tmp/mlp.bin") / 1048576))
plan() { # plan P: P stages, the hidden layers split evenly (the output layer with the last)
  "$build/pdonnx" plan "$tmp/mlp.onnx" --workers "$1" --straight --algo uniform --batch 4 -o "$tmp/p$1.json" > /dev/null
  python3 - "$tmp/p$1.json" "$1" "$layers" <<'PY'
import json, sys
path, P, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = json.load(open(path))
n = p["nodes"]  # fc0 relu0 fc1 relu1 ... fcL
cut = [2 * (L * k // P) for k in range(P)] + [len(n)]
for k in range(P):
    p["stages"][k]["nodes"] = n[cut[k]:cut[k + 1]]
json.dump(p, open(path, "w"))
PY
}
run() { # run P LAZY: the largest peak among the P processes, in MB
  local P=$1 cmd=("$build/tests/peakrss" "$tmp/peak" "$build/pdonnx" train "$tmp/mlp.onnx" --data "$tmp/x.npy"
    --labels "$tmp/y.npy" --steps 3 --batch 8 --plan "$tmp/p$P.json" --microbatches 2 --optimizer "$opt" --quiet
    --save "$tmp/out.onnx")
  rm -f "$tmp"/peak.*
  if [ "$P" = 1 ]; then PDONNX_LAZY_WEIGHTS=$2 "${cmd[@]}"; else PDONNX_LAZY_WEIGHTS=$2 mpirun --oversubscribe -np "$P" "${cmd[@]}"; fi
  cat "$tmp"/peak.* | sort -n | tail -1 | awk '{printf "%d", $1 / 1024}'
}
echo "gen_mlp $layers x $width ($mb MB of weights), $opt, batch 8 in 2 microbatches, 3 steps, --save"
echo
echo "| processes (stages) | peak per process, whole model in each | per-stage loading | vs one process |"
echo "|---|---|---|---|"
for P in 1 2 4; do
  plan "$P"
  before=$(run "$P" 0)
  after=$(run "$P" 1)
  [ "$P" = 1 ] && one=$before
  echo "| $P | $before MB | $after MB | $((100 * after / one))% |"
done
