# common.sh - what the shell tests share; sourced, after `set -u`:
#   $tmp       a temporary folder, removed at exit
#   ok/bad     print an OK / NOT OK line; bad counts into $fails
#   mpi_setup  skip (exit 77) without mpirun; Open MPI's settings for running
#              as root, oversubscribed, on a machine without fast networks
#   mpi N ...  mpirun -np N ..., bounded to 5 minutes
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
