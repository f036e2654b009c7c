# common.sh - what the shell tests share; sourced, after `set -u`:
#   $tmp       a temporary folder, removed at exit
#   ok/bad     print an OK / NOT OK line; bad counts into $fails
#   mpi_setup  skip (exit 77) without mpirun; Open MPI's settings for running
#              as root, oversubscribed, on a machine without fast networks
#   mpi N ...  mpirun -np N ..., bounded to 5 minutes
#   kill_rank SECS PATTERN N ...
#              mpi N ... in the background (output in $tmp/log), SECS later
#              kill -9 of the newest process whose command line matches
#              PATTERN (a rank: mpirun started first); sets victim, rc (the
#              job's status) and took (seconds from the kill to the job's end)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "OK $*"; }
bad() { echo "NOT OK $*"; fails=$((fails + 1)); }
mpi_setup() {
  command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
}
mpi() { timeout 300 mpirun --oversubscribe -np "$@"; }
kill_rank() {
  local secs=$1 pat=$2 job start
  shift 2
  mpi "$@" > "$tmp/log" 2>&1 &
  job=$!
  sleep "$secs"
  victim=$(pgrep -f "$pat" | tail -1)
  start=$(date +%s)
  [ -n "$victim" ] && kill -9 "$victim"
  wait $job
  rc=$?
  took=$(($(date +%s) - start))
}
