#!/usr/bin/env bash
# test_exports.sh - libpipedream.so exports the public API and nothing else:
# its defined dynamic symbols are exactly the functions pipedream.h declares
# with PDDEF (libpipedream.map hides the private pd__ ones).
#   test_exports.sh LIBPIPEDREAM_SO PIPEDREAM_H
set -u
lib=$1 header=$2
command -v nm >/dev/null || { echo "no nm: skipped"; exit 77; }
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u)
declared=$(sed '/BEGIN GENERATED IMPLEMENTATION/,$d' "$header" | tr '\n' ' ' | grep -o 'PDDEF[^;{]*;' |
  grep -o 'pd_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//' | sort -u)
n_exp=$(echo "$exported" | grep -c .)
n_dec=$(echo "$declared" | grep -c .)
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
echo "# $n_exp symbols exported, $n_dec functions declared in pipedream.h"
fail=0
[ -z "$extra" ] && echo "OK nothing exported beyond pipedream.h" || { echo "NOT OK exported, not in pipedream.h: $(echo $extra | head -c 400)"; fail=1; }
[ -z "$missing" ] && echo "OK every function of pipedream.h exported" || { echo "NOT OK declared, not exported: $(echo $missing | head -c 400)"; fail=1; }
[ "$n_dec" -ge 60 ] && echo "OK the declarations were found ($n_dec)" || { echo "NOT OK only $n_dec declarations found in $header"; fail=1; }
exit $fail
