#!/usr/bin/env bash
# test_nccl.sh TEST_NCCL - the NCCL transport between two processes, one GPU
# each (tests/test_nccl.c). Skipped (77) without two CUDA devices or mpirun.
set -u
prog=$1
command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
n=$("$prog" --devices 2> /dev/null || echo 0)
[ "${n:-0}" -ge 2 ] || { echo "$n CUDA devices (NCCL needs one per process, two processes): skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 300 mpirun --oversubscribe -np 2 "$prog"
