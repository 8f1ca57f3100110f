#!/usr/bin/env bash
# Makes NVRTC available with no CUDA toolkit and no GPU, for tests/kernel.rs (the kernel
# compiled through ptxas): fetches NVIDIA's NVRTC wheel from PyPI once into DIR (default
# target/nvrtc) and prints the directory to put on LD_LIBRARY_PATH. The version is pinned, so
# a run compiles with what the last one did. Exits 1, saying why, when it cannot.
#
# usage: nvrtc.sh [DIR]
set -euo pipefail
version=12.9.86
dir=${1:-target/nvrtc}
lib=$dir/nvidia/cuda_nvrtc/lib
if [[ ! -e $lib/libnvrtc.so.12 ]]; then
    mkdir -p "$dir/wheel"
    if ! python3 -m pip download --quiet --no-deps --only-binary=:all: \
        -d "$dir/wheel" "nvidia-cuda-nvrtc-cu12==$version" >&2; then
        echo "nvrtc.sh: cannot fetch nvidia-cuda-nvrtc-cu12==$version from PyPI" >&2
        exit 1
    fi
    python3 -m zipfile -e "$dir"/wheel/nvidia_cuda_nvrtc_cu12-"$version"-*.whl "$dir" >&2
fi
# cudarc looks for libnvrtc.so among other names; the wheel has only the versioned one.
ln -sf libnvrtc.so.12 "$lib/libnvrtc.so"
cd "$lib" && pwd
