# common.sh - what the shell tests share; sourced, after `set -u`:
#   $tmp       a temporary folder, removed at exit
#   ok/bad     print an OK / NOT OK line; bad counts into $fails
#   expect_error NAME WANT CMD...
#              CMD refused as a user should see it: within 30 s, a status of
#              1 to 123 (not a signal, not the timeout), one printable line on
#              stderr holding WANT; stdout must be empty, or (ERR_STDOUT=quiet-run)
#              may hold start-up lines but nothing trained
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
has_ctl() { LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$1"; }
expect_error() {
  local name=$1 want=$2 rc lines quiet
  shift 2
  timeout 30 "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  lines=$(wc -l <"$tmp/err")
  if [ "${ERR_STDOUT:-}" = quiet-run ]; then
    ! grep -q "^training \|^step \|^trained " "$tmp/out"
  else
    [ ! -s "$tmp/out" ]
  fi
  quiet=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" -eq 1 ] && ! has_ctl "$tmp/err" && [ $quiet = 0 ] &&
     grep -qF -- "$want" "$tmp/err"; then
    ok "$name: $(cat "$tmp/err")"
  else
    bad "$name: rc=$rc, stderr ($lines lines): $(head -c 400 "$tmp/err" | cat -v), stdout: $(head -c 200 "$tmp/out" | cat -v), wanted '$want'"
  fi
}
mpi_setup() {
  command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
}
# OpenMPI's own allocations (ompi_op_base_op_select...) are never freed: LeakSanitizer off under mpirun
mpi() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 300 mpirun --oversubscribe -np "$@"; }
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
