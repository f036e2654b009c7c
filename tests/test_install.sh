#!/usr/bin/env bash
# test_install.sh - the installed library as an embedding program sees it.
#
#   test_install.sh BUILDDIR SRCDIR WORKDIR PREFIX LIBDIR INCLUDEDIR SANITIZE CC...
#
# meson install --destdir into WORKDIR; checks the header, the shared and
# static libraries and pipedream.pc are there; builds examples/embed against
# them with pkg-config alone (PKG_CONFIG_PATH points into the destdir, whose
# pipedream.pc gets the destdir's prefix), once with the shared library and once statically linked
# (pkg-config --static: the .pc's private dependencies); runs both and checks
# that the loss went down and that the model reloaded from memory agrees.
# The same for examples/embed/pipeline.c (a 2-stage pipeline with
# checkpoints, resumed by a new trainer): its resumed model must equal the
# uninterrupted one.
# With the CUDA backend: the module libpdcuda.so is installed beside the
# library, neither libpipedream.so nor pipedream.pc names a CUDA library, and
# the installed library loads the installed module on the first CUDA call.
# Skipped (77) on sanitizer builds.
set -u
build=$1 src=$2 work=$3 prefix=$4 libdir=$5 includedir=$6 sanitize=$7
shift 7
if [ "$sanitize" != "none" ]; then
    # a plain cc line cannot link a library built with -fsanitize
    echo "library built with -fsanitize=$sanitize: skipped"
    exit 77
fi
cc="$*"
fail=0
bad() { echo "FAIL $*"; fail=1; }

case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $includedir in /*) ;; *) includedir=$prefix/$includedir ;; esac
rm -rf "$work"
mkdir -p "$work"
dest=$work/dest
if ! meson install -C "$build" --destdir "$dest" --no-rebuild >"$work/install.log" 2>&1; then
    cat "$work/install.log"
    echo "FAIL meson install --destdir"
    exit 1
fi
for f in "$includedir/pipedream.h" "$libdir/libpipedream.a" "$libdir/libpipedream.so" "$libdir/pkgconfig/pipedream.pc"; do
    if [ -e "$dest$f" ]; then echo "ok   installed $f"; else bad "not installed: $f"; fi
done
[ $fail -eq 0 ] || exit 1

pc=$dest$libdir/pkgconfig/pipedream.pc
# The .pc names the real prefix; every other path derives from ${prefix}, so
# moving the prefix into the destdir relocates it (this copy only).
if grep -q '^libdir=${prefix}' "$pc" && grep -q '^includedir=${prefix}' "$pc"; then
    echo "ok   pipedream.pc: libdir and includedir under \${prefix}"
else
    bad "pipedream.pc: libdir or includedir not under \${prefix}"
fi
sed -i "s|^prefix=.*|prefix=$dest$prefix|" "$pc"
export PKG_CONFIG_PATH=$dest$libdir/pkgconfig
for want in "Requires.private:.*libprotobuf-c" "Requires.private:.*libcjson" "Libs.private:.*-lm" "Libs.private:.*thread"; do
    if grep -q "$want" "$pc"; then echo "ok   pipedream.pc: $want"; else bad "pipedream.pc lacks $want"; fi
done
if grep -q "openblas" "$pc"; then echo "ok   pipedream.pc names openblas"; else bad "pipedream.pc does not name openblas"; fi
cuda_libs='cudart|cublas|cudnn|libcuda'
if grep -Eq "$cuda_libs" "$pc"; then bad "pipedream.pc names a CUDA library: $(grep -E "$cuda_libs" "$pc")"; fi
if readelf -d "$dest$libdir/libpipedream.so" | grep NEEDED | grep -Eq "$cuda_libs"; then
    bad "libpipedream.so links a CUDA library: $(readelf -d "$dest$libdir/libpipedream.so" | grep NEEDED | tr -s ' ')"
else
    echo "ok   neither pipedream.pc nor libpipedream.so names a CUDA library"
fi
if [ -e "$build/libpdcuda.so" ]; then
    # the CUDA module: installed beside the library, found there by the installed library
    if [ -e "$dest$libdir/libpdcuda.so" ]; then
        echo "ok   installed $libdir/libpdcuda.so (the CUDA module)"
        if out=$(LD_LIBRARY_PATH="$dest$libdir" "$build/tests/test_cuda_module" lazy "$src/examples/digits_mlp.onnx" \
                 "$dest$libdir" 2>&1); then
            echo "ok   the installed libpipedream loads the installed module on the first CUDA call"
        else
            echo "$out" | sed 's/^/    /'
            bad "test_cuda_module lazy against the installed library"
        fi
    else
        bad "not installed: $libdir/libpdcuda.so"
    fi
fi
echo "pkg-config --cflags --libs pipedream: $(pkg-config --cflags --libs pipedream)"
echo "pkg-config --static --libs pipedream: $(pkg-config --static --libs pipedream)"

cp -r "$src/examples/embed" "$work/embed"
model=$src/examples/digits_mlp.onnx
check_run() { # check_run NAME [ENV...] : runs ./embed, checks its output
    local name=$1
    shift
    local out
    out=$(cd "$work/embed" && env "$@" ./embed "$model" 2>&1)
    local rc=$?
    echo "$out" | sed 's/^/    /'
    if [ $rc -ne 0 ]; then bad "$name: embed exited with $rc"; return; fi
    local first last
    first=$(echo "$out" | awk '$1 == "step" {print $4; exit}')
    last=$(echo "$out" | awk '$1 == "step" {v = $4} END {print v}')
    if [ -z "$first" ] || ! awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a / 2)}'; then
        bad "$name: the loss did not go down ($first -> $last)"
    elif ! echo "$out" | grep -q "^OK: "; then
        bad "$name: no OK line"
    else
        echo "ok   $name: loss $first -> $last, the reloaded model agrees"
    fi
}

check_pipeline() { # check_pipeline NAME [ENV...] : runs ./pipeline in a fresh checkpoint folder
    local name=$1
    shift
    local out
    rm -rf "$work/embed/ckpt-$name"
    out=$(cd "$work/embed" && env "$@" ./pipeline "$model" "ckpt-$name" 2>&1)
    local rc=$?
    echo "$out" | sed 's/^/    /'
    if [ $rc -ne 0 ]; then bad "$name pipeline: exited with $rc"; return; fi
    if ! echo "$out" | grep -q "^resumed at step 20$"; then
        bad "$name pipeline: did not resume at step 20"
    elif ! echo "$out" | grep -q "equals the uninterrupted one" || ! echo "$out" | grep -q "^OK: "; then
        bad "$name pipeline: the resumed model differs, or the loss did not go down"
    elif ! ls "$work/embed/ckpt-$name" | grep -q "^ckpt-0*40$"; then
        bad "$name pipeline: no checkpoint of step 40 in its folder"
    else
        echo "ok   $name pipeline: checkpointed, resumed by a new trainer, equal to the uninterrupted run"
    fi
}

# shared: the plain pkg-config line of the README
if (cd "$work/embed" && $cc -O2 -Wall -Wextra -Werror embed.c -o embed $(pkg-config --cflags --libs pipedream) -lm) >"$work/cc.log" 2>&1; then
    echo "ok   built with: cc embed.c \$(pkg-config --cflags --libs pipedream)"
    check_run "shared" LD_LIBRARY_PATH="$dest$libdir"
else
    cat "$work/cc.log"
    bad "building examples/embed against the shared library"
fi
if (cd "$work/embed" && $cc -O2 -Wall -Wextra -Werror pipeline.c -o pipeline $(pkg-config --cflags --libs pipedream) -lm) >"$work/cc.log" 2>&1; then
    echo "ok   built with: cc pipeline.c \$(pkg-config --cflags --libs pipedream)"
    check_pipeline "shared" LD_LIBRARY_PATH="$dest$libdir"
else
    cat "$work/cc.log"
    bad "building examples/embed/pipeline.c against the shared library"
fi

# static: the example's Makefile, make STATIC=1
if (cd "$work/embed" && rm -f embed pipeline && make CC="$cc" STATIC=1 CFLAGS="-O2 -Wall -Wextra -Werror") >"$work/make.log" 2>&1; then
    echo "ok   built with: make STATIC=1 (pkg-config --static)"
    for prog in embed pipeline; do
        if ldd "$work/embed/$prog" 2>/dev/null | grep -q libpipedream; then
            bad "static: $prog still loads libpipedream.so"
        fi
    done
    check_run "static" LD_LIBRARY_PATH=
    check_pipeline "static" LD_LIBRARY_PATH=
else
    cat "$work/make.log"
    bad "building examples/embed against the static library with its Makefile"
fi
exit $fail
