#!/usr/bin/env bash
# test_header.sh - pipedream.h on its own, as a user's compiler sees it.
#
#   test_header.sh c   SRCDIR WORKDIR CC...    C11 -Wall -Wextra -pedantic -Werror:
#       declarations alone; the implementation (tests/test_header_only.c, run);
#       implementation and declarations in two translation units linked
#       together; the implementation on the caller's allocator (run).
#   test_header.sh cxx SRCDIR WORKDIR CC... -- CXX...   the same flags in C++:
#       declarations alone; a C++ program linked with the implementation built
#       as C (run); the implementation itself compiled as C++: linked with the
#       same program (run), tests/test_header_only.c (run) and the caller's
#       allocator (run).
# No project flags (-D_GNU_SOURCE and the like) are passed: only what a user
# would type. Exits 77 (skipped) in cxx mode when there is no C++ compiler.
set -u
mode=$1 src=$2 work=$3
shift 3
cc=() cxx=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cc+=("$1"); shift; done
[ $# -gt 0 ] && shift
cxx=("$@")
h=$src/tests/header
mkdir -p "$work"
cflags=(-std=c11 -Wall -Wextra -pedantic -Werror -I"$src")
cxxflags=(-std=c++11 -Wall -Wextra -pedantic -Werror -I"$src")
fail=0
step() { # step NAME COMMAND...: runs it, shows its output on failure
    local name=$1
    shift
    if out=$("$@" 2>&1); then
        echo "ok   $name"
    else
        echo "FAIL $name: $*"
        echo "$out" | head -40
        fail=1
    fi
}

case $mode in
c)
    step "C11 declarations only" "${cc[@]}" "${cflags[@]}" -c "$h/decl_only.c" -o "$work/decl.o"
    step "C11 implementation (test_header_only.c)" "${cc[@]}" "${cflags[@]}" -c "$src/tests/test_header_only.c" -o "$work/impl.o"
    step "implementation + declarations, two units, linked" "${cc[@]}" "$work/impl.o" "$work/decl.o" -o "$work/header_only" -lm -lpthread
    step "header-only program runs" "$work/header_only"
    step "C11 implementation on the caller's allocator" "${cc[@]}" "${cflags[@]}" "$h/alloc.c" -o "$work/alloc" -lm -lpthread
    step "caller's allocator: everything given back" "$work/alloc"
    # PD_NODISCARD: a status dropped on the floor is a warning (an error under -Werror)
    printf '#include "pipedream.h"\nvoid f(void) { pd_graph_load_file("m.onnx", NULL, NULL); }\n' > "$work/drop.c"
    step "a dropped pd_status does not compile under -Werror" sh -c 'out=$("$@" 2>&1) && exit 1; echo "$out" | grep -q "unused-result\|nodiscard"' sh "${cc[@]}" "${cflags[@]}" -c "$work/drop.c" -o "$work/drop.o"
    ;;
cxx)
    if [ ${#cxx[@]} -eq 0 ]; then
        echo "no C++ compiler: skipped"
        exit 77
    fi
    step "C++ declarations only" "${cxx[@]}" "${cxxflags[@]}" -x c++ -c "$h/decl_only.c" -o "$work/decl_cxx.o"
    step "implementation built as C" "${cc[@]}" "${cflags[@]}" -c "$h/impl_only.c" -o "$work/impl_c.o"
    step "C++ program on the API" "${cxx[@]}" "${cxxflags[@]}" -c "$h/use.cpp" -o "$work/use.o"
    step "C++ program linked with the C implementation" "${cxx[@]}" "$work/use.o" "$work/impl_c.o" "$work/decl_cxx.o" -o "$work/use_cxx" -lm -lpthread
    step "C++ program runs" "$work/use_cxx"
    step "C++ implementation (PIPEDREAM_IMPLEMENTATION in a C++ file)" "${cxx[@]}" "${cxxflags[@]}" -x c++ -c "$h/impl_only.c" -o "$work/impl_cxx.o"
    step "C++ program linked with the C++ implementation" "${cxx[@]}" "$work/use.o" "$work/impl_cxx.o" "$work/decl_cxx.o" -o "$work/use_cxx_impl" -lm -lpthread
    step "... runs" "$work/use_cxx_impl"
    step "test_header_only.c compiled as C++" "${cxx[@]}" "${cxxflags[@]}" -x c++ "$src/tests/test_header_only.c" -o "$work/header_only_cxx" -lm -lpthread
    step "... runs" "$work/header_only_cxx"
    step "C++ implementation on the caller's allocator" "${cxx[@]}" "${cxxflags[@]}" -x c++ "$h/alloc.c" -o "$work/alloc_cxx" -lm -lpthread
    step "... everything given back" "$work/alloc_cxx"
    ;;
*)
    echo "usage: $0 c|cxx SRCDIR WORKDIR CC... [-- CXX...]"
    exit 2
    ;;
esac
exit $fail
