#!/usr/bin/env bash
# test_nccl.sh TEST_NCCL - the NCCL transport between two processes, one GPU
# each (tests/test_nccl.c): messages and sums checked exactly; a device that
# does not exist on rank 1 is an error on both processes, naming rank 1;
# rank 1 failing mid-run ends rank 0's wait for its message within seconds
# with an error naming rank 1, and the job exits non-zero. Skipped (77)
# without two CUDA devices or mpirun.
set -u
prog=$1
command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
n=$("$prog" --devices 2> /dev/null || echo 0)
[ "${n:-0}" -ge 2 ] || { echo "$n CUDA devices (NCCL needs one per process, two processes): skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fails=0
timeout 300 mpirun --oversubscribe -np 2 "$prog" || fails=1
timeout 120 mpirun --oversubscribe -np 2 "$prog" --bad-device > "$log" 2>&1
rc=$?
cat "$log"
if [ $rc = 0 ] && [ "$(grep -c '^OK ' "$log")" = 2 ] && ! grep -q 'NOT OK' "$log"; then
  echo "OK a set-up failure on rank 1: an error on both processes, naming rank 1"
else
  echo "NOT OK a set-up failure on rank 1: exit $rc"
  fails=1
fi
start=$(date +%s)
timeout 120 mpirun --oversubscribe -np 2 "$prog" --fail > "$log" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$log"
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q '^OK a peer that failed mid-run' "$log" && ! grep -q 'NOT OK' "$log" &&
   [ $took -lt 60 ]; then
  echo "OK rank 1 failing mid-run: the job ended in ${took} s, exit $rc, rank 0's wait naming rank 1"
else
  echo "NOT OK rank 1 failing mid-run: exit $rc after ${took} s"
  fails=1
fi
exit $fails
