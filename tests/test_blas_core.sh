#!/usr/bin/env bash
# test_blas_core.sh - pdonnx's programs start on the OpenBLAS kernels of the
# CPU's vector instructions when OpenBLAS's own choice is older (an OpenBLAS
# older than the CPU takes Prescott's: docs/PERF.md, "The same table on a
# quiet host"). The shim (LD_PRELOAD) makes OpenBLAS say Prescott; pdonnx
# must then start again with OPENBLAS_CORETYPE, and OpenBLAS, reporting at
# load (OPENBLAS_VERBOSE=2), load those kernels; pdonnx says so in one line
# at a terminal and in none when stderr is a file; a user's
# OPENBLAS_CORETYPE is left alone. The rule itself: test_blas_core.c.
#   test_blas_core.sh PDONNX SOURCE_DIR SHIM
set -u
pdonnx=$1 src=$2 shim=$3
. "$src/tests/common.sh"
export OMP_WAIT_POLICY=passive OPENBLAS_VERBOSE=2
unset OPENBLAS_CORETYPE
# a sanitizer runtime need not come first for a preloaded library of ours
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f && has avx512bw && has avx512dq && has avx512vl; then want=SKYLAKEX core=SkylakeX
elif has avx2 && has fma; then want=HASWELL core=Haswell
elif has avx; then want=SANDYBRIDGE core=Sandybridge
else echo "SKIP: no AVX on this CPU (or not x86): no kernels to advise"; exit 77
fi

X=$src/examples/digits/train_x.npy Y=$src/examples/digits/train_y.npy
train=("$pdonnx" train "$src/examples/digits_mlp.onnx" --data "$X" --labels "$Y" --steps 3 --quiet)

# stderr to a file: no line (a script's stderr keeps what it expects), the same new start
LD_PRELOAD=$shim "${train[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
line="OpenBLAS chose kernels for older vector instructions than this CPU has; running with OPENBLAS_CORETYPE=$want "
last=$(grep -o '^Core: .*' "$tmp/err" | tail -1)
[ $rc = 0 ] && ! grep -q "OPENBLAS_CORETYPE" "$tmp/err" && [ "$last" = "Core: $core" ] \
  && ok "OpenBLAS on Prescott, stderr a file: no line, the run again with OPENBLAS_CORETYPE=$want, OpenBLAS on $core" \
  || bad "OpenBLAS on Prescott, stderr a file: rc $rc, OpenBLAS's last report '$last' (want Core: $core):" \
         "$(head -c 600 "$tmp/err")"

# at a terminal (script(1) gives the run one): the line, once
if command -v script >/dev/null; then
  script -qec "$(printf '%q ' env LD_PRELOAD="$shim" "${train[@]}")" /dev/null >"$tmp/tty" 2>&1
  rc=$?
  note=$(grep -c "$line" "$tmp/tty")
  last=$(grep -o '^Core: [A-Za-z]*' "$tmp/tty" | tail -1)
  [ $rc = 0 ] && [ "$note" = 1 ] && [ "$last" = "Core: $core" ] \
    && ok "OpenBLAS on Prescott, at a terminal: one line, OPENBLAS_CORETYPE=$want, OpenBLAS on $core, trained" \
    || bad "OpenBLAS on Prescott, at a terminal: rc $rc, $note lines, OpenBLAS's last report '$last':" \
           "$(head -c 600 "$tmp/tty")"
else
  echo "SKIP at a terminal: no script(1)"
fi

LD_PRELOAD=$shim OPENBLAS_CORETYPE=NEHALEM "${train[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
last=$(grep -o '^Core: .*' "$tmp/err" | tail -1)
[ $rc = 0 ] && ! grep -q "OPENBLAS_CORETYPE" "$tmp/err" && [ "$last" = "Core: Nehalem" ] \
  && ok "the user's OPENBLAS_CORETYPE=NEHALEM kept, no line" \
  || bad "the user's OPENBLAS_CORETYPE: rc $rc, OpenBLAS's last report '$last': $(head -c 600 "$tmp/err")"

[ $fails = 0 ]
