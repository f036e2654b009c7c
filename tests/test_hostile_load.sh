#!/usr/bin/env bash
# test_hostile_load.sh - pdonnx on hostile files (issue 22): a FIFO as external
# data, .npy headers whose sizes overflow, shapes whose FLOPs overflow, names
# with control bytes, opsets that do not exist, a tiny model asking for an
# 8 GiB constant. Each is expect_error promptly with one printable line naming the
# file or node and a non-zero exit, or (FLOPs, names) shown sanely.
#   test_hostile_load.sh PDONNX SOURCE_DIR TEST_LOADER
# The models are written by TEST_LOADER DIR (tests/test_loader.c: hostile/, ext/).
set -u
pdonnx=$1 src=$2 loader=$3
fx=$src/tests/fixtures
. "$src/tests/common.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# raw control bytes (newline excepted) in a file
"$loader" "$tmp/m" >"$tmp/loader.log" 2>&1 # its own failures are the loader test's
h=$tmp/m/hostile
[ -d "$tmp/m/ext" ] || { echo "test_loader wrote no models: $(tail -3 "$tmp/loader.log")"; exit 1; }

# --- D4: external data naming a FIFO in the model's folder blocked info for ever
[ -p "$tmp/m/ext/fifo.bin" ] || bad "test_loader made no FIFO"
expect_error "external data naming a FIFO" "fifo.bin' is not a regular file" "$pdonnx" info "$tmp/m/ext/fifo.onnx"

# --- D7: .npy headers whose sizes do not fit an int64
# npy DESCR SHAPE OUT [DATA_BYTES]: a version 1.0 file with that header
npy() {
  local dict="{'descr': '$1', 'fortran_order': False, 'shape': $2, }" len pad hlen
  len=$((${#dict} + 1))
  pad=$(((64 - (10 + len) % 64) % 64))
  hlen=$((len + pad))
  { printf '\223NUMPY\001\000'
    printf "\\$(printf %03o $((hlen & 255)))\\$(printf %03o $((hlen >> 8)))"
    printf '%s%*s\n' "$dict" "$pad" ''
    head -c "${4:-16}" /dev/zero; } >"$3"
}
mlp=("$pdonnx" run "$fx/mlp/model.onnx" --input)
npy '|u1' '(9223372036854775807,)' "$tmp/n63.npy"
expect_error ".npy of 2^63-1 bytes: the file is too short (no allocation tried)" "n63.npy: truncated: header promises" \
  "${mlp[@]}" x="$tmp/n63.npy"
npy '<f4' '(4611686018427387904,)' "$tmp/n62.npy"
expect_error ".npy of 2^62 float32 (2^64 bytes)" "n62.npy: array size overflows" "${mlp[@]}" x="$tmp/n62.npy"
npy '<f4' '(3037000500, 3037000500)' "$tmp/prod.npy"
expect_error ".npy whose dims' product overflows" "prod.npy: array size overflows" "${mlp[@]}" x="$tmp/prod.npy"
npy '<f4' '(0, 4611686018427387904, 4611686018427387904)' "$tmp/empty.npy" 0
expect_error ".npy with no elements whose rows overflow" "empty.npy: array size overflows" "${mlp[@]}" x="$tmp/empty.npy"
npy '<f4' '(99999999999999999999999, 4)' "$tmp/big.npy"
expect_error ".npy dim past 2^63" "big.npy: bad shape" "${mlp[@]}" x="$tmp/big.npy"
npy '<f4' '(-1, 4)' "$tmp/neg.npy"
expect_error ".npy with a negative dim" "neg.npy: bad shape" "${mlp[@]}" x="$tmp/neg.npy"

# --- D9: FLOPs of huge declared shapes (2^91 for one MatMul) overflowed to negative
if timeout 20 "$pdonnx" info "$h/flops.onnx" >"$tmp/out" 2>&1 && ! grep -q -- "-[0-9]" "$tmp/out" &&
   grep -q "^   0  mm .* > *9.22 E " "$tmp/out" && grep -q "forward >.* EFLOPs" "$tmp/out"; then
  ok "info on a 2^91-FLOP MatMul: counts stop at INT64_MAX, shown as '> 9.22 E'"
else
  bad "info on a 2^91-FLOP MatMul: $(cat "$tmp/out")"
fi

# --- D14: control bytes in names could forge a second 'pdonnx:' line or drive the terminal
if timeout 20 "$pdonnx" info "$h/names.onnx" >"$tmp/out" 2>&1 && ! has_ctl "$tmp/out" &&
   ! grep -q "^pdonnx: forged" "$tmp/out" && grep -qF 'r\npdonnx: forged\x1b[31m' "$tmp/out" &&
   grep -qF 'x\tin\x1b]0;title\x07' "$tmp/out" && [ "$(wc -l <"$tmp/out")" -eq 8 ]; then
  ok "info escapes control bytes in node, input and output names"
else
  bad "info with control bytes in names: $(cat -v "$tmp/out")"
fi
expect_error "an error naming a node with a newline in its name" "node 'r\\npdonnx: forged\\x1b[31m' (Add)" \
  "$pdonnx" info "$h/names_bad.onnx"
expect_error "run: an input with control bytes not given" "input 'x\\tin\\x1b]0;title\\x07' is not given" \
  "$pdonnx" run "$h/names.onnx"

# --- D15: opsets that do not exist were accepted
for c in "99 opset_99" "0 opset_0" "-1 opset_neg" "4611686018427387904 opset_huge"; do
  set -- $c
  expect_error "ai.onnx opset $1" "$2.onnx: opset $1 of domain 'ai.onnx' does not exist" "$pdonnx" info "$h/$2.onnx"
done
expect_error "no opset imported" "opset_none.onnx: the model imports no opset" "$pdonnx" info "$h/opset_none.onnx"
timeout 20 "$pdonnx" info "$h/opset_27.onnx" >"$tmp/out" 2>&1 && ok "opset 27 loads" || bad "opset 27: $(cat "$tmp/out")"

# --- D17: 85 bytes of model asked info for an 8 GiB constant (allocated and filled)
size=$(wc -c <"$h/const_8g.onnx")
# 1.5 GB of address space proves nothing of 8 GiB is allocated; a sanitized
# build reserves terabytes of shadow memory up front, so there it runs unlimited
vlimit=1500000
nm "$pdonnx" 2>/dev/null | grep -q __asan_init && vlimit=unlimited
limited=(bash -c 'ulimit -v "$0" && exec "$@"' "$vlimit")
expect_error "ConstantOfShape of 8 GiB ($size-byte model), address space $vlimit KiB" \
  "node 'cos' (ConstantOfShape): folding it makes a constant of 8589934592 bytes" "${limited[@]}" "$pdonnx" info "$h/const_8g.onnx"
expect_error "--max-constant-bytes below a 4 MiB constant" "beyond the cap of 1000000 bytes" \
  "$pdonnx" info "$h/const_4m.onnx" --max-constant-bytes 1000000
dx=$src/examples/digits
expect_error "train: the same 8 GiB constant" "folding it makes a constant of 8589934592 bytes" \
  "${limited[@]}" "$pdonnx" train "$h/const_8g.onnx" --data "$dx/train_x.npy" --labels "$dx/train_y.npy"
expect_error "train --max-constant-bytes" "beyond the cap of 1000000 bytes" \
  "$pdonnx" train "$h/const_4m.onnx" --data "$dx/train_x.npy" --labels "$dx/train_y.npy" --max-constant-bytes 1000000
if timeout 20 "$pdonnx" info "$h/const_4m.onnx" --max-constant-bytes 5000000 >"$tmp/out" 2>&1 &&
   grep -q "^  output big .*float32\[1024,1024\]" "$tmp/out"; then
  ok "--max-constant-bytes above a 4 MiB constant: it loads"
else
  bad "--max-constant-bytes 5000000: $(cat "$tmp/out")"
fi
expect_error "--max-constant-bytes 0" "--max-constant-bytes expects an integer" \
  "$pdonnx" info "$h/const_4m.onnx" --max-constant-bytes 0
expect_error "run honours --max-constant-bytes" "beyond the cap of 1000 bytes" \
  "$pdonnx" run "$h/const_4m.onnx" --max-constant-bytes 1000

# --- issue 19: control flow is unrolled at load; a Loop of 10^6 iterations, If
# nested past the limit and a data-dependent Loop are refused in one line, promptly
expect_error "Loop of 10^6 iterations" "node 'L' (Loop): the Loop runs past 4096 iterations" \
  "${limited[@]}" "$pdonnx" info "$h/loop_1e6.onnx"
expect_error "If nested 20 deep" "node 'if0' (If): subgraphs nest deeper than 16 levels" "$pdonnx" info "$h/if_20.onnx"
expect_error "Loop whose condition the data decides" "data-dependent loop" "$pdonnx" info "$h/loop_data.onnx"

[ $fails -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
