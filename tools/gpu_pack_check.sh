#!/usr/bin/env bash
# gpu_pack_check.sh - checks a folder packed by tools/gpu_pack.sh loads on a
# bare CUDA machine: every shared library each packed ELF file needs (its
# DT_NEEDED entries, read with readelf, not ldd: this machine's resolution
# would hide a library found only here) is either in the pack's lib/ or one a
# bare CUDA machine has (the C and C++ runtimes, the driver's libcuda and the
# toolkit's runtime libraries); and the pack stays under 60 MiB, below the 64
# MiB a device call can carry. Prints one line per problem; exits 1 on any.
#
#   tools/gpu_pack_check.sh PACK_DIR [MAX_MIB (60)]
set -euo pipefail
pack=${1:?usage: tools/gpu_pack_check.sh PACK_DIR [MAX_MIB]}
max=${2:-60}
[ -d "$pack" ] || { echo "gpu_pack_check: $pack: not a folder" >&2; exit 1; }
# what a bare machine with the NVIDIA driver and the CUDA toolkit has
system='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnccl)\.so'
bad=0 n=0
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q 'ELF' || continue
  n=$((n + 1))
  for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ "$lib" =~ $system ]] && continue
    [ -e "$pack/lib/$lib" ] && continue
    echo "gpu_pack_check: ${f#"$pack"/} needs $lib, which is not in $pack/lib and not on a bare CUDA machine"
    bad=1
  done
done < <(find "$pack" -type f -print0)
[ "$n" -gt 0 ] || { echo "gpu_pack_check: $pack holds no ELF file"; exit 1; }
kib=$(du -sk "$pack" | cut -f1)
if [ "$kib" -ge $((max * 1024)) ]; then
  echo "gpu_pack_check: $pack is $((kib / 1024)) MiB, over the ${max} MiB limit"
  bad=1
fi
[ "$bad" = 0 ] && echo "gpu_pack_check: $pack: $n ELF files, every needed library packed or on a bare CUDA machine, $((kib / 1024)) MiB"
exit "$bad"
