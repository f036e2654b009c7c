# gpu_env.sh - sourced by tests/run_gpu.sh and bench/run_cuda.sh: sets
# PD_GPU_LIBS to the library path a packed build (tools/gpu_pack.sh) in $bin
# needs on a GPU machine: its own lib/ folder, then the CUDA toolkit's
# libraries, then wherever cudart, cuBLAS(Lt) and cuDNN are found (PyTorch's
# wheels bring cuDNN where the toolkit has none).
PD_GPU_LIBS="$bin/lib:$bin"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && PD_GPU_LIBS="$PD_GPU_LIBS:$d"
done
for f in $(find /usr/local /opt /usr/lib -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libcublasLt.so.13' \
             -o -name 'libcudart.so.13' 2>/dev/null | sort -u); do
  case ":$PD_GPU_LIBS:" in *":$(dirname "$f"):"*) ;; *) PD_GPU_LIBS="$PD_GPU_LIBS:$(dirname "$f")" ;; esac
done
export PD_GPU_LIBS
