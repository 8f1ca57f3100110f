#!/usr/bin/env python3
"""Times NVRTC on the executor's interpreter kernel with no GPU: the whole source to PTX
(virtual compute_XX, what the driver then JIT-compiles at module load) and to CUBIN (real
sm_XX, loaded as is), and one element type's entries alone (the -DCOLL_DTYPE_<T> selection
a load compiles). Each case runs REPEAT times; the best and the median are printed.

usage: LD_LIBRARY_PATH=$(bash tests/scripts/nvrtc.sh) python3 bench/nvrtc_times.py \
           [ARCH=90] [REPEAT=3] [EXTRA NVRTC OPTION ...]
CASES=f32,all (substrings of the case names) runs only those cases.
"""
import ctypes
import os
import pathlib
import statistics
import sys
import time

KERNEL = pathlib.Path(__file__).resolve().parent.parent / "executor/src/cuda/kernel"
FILES = ["abi.h", "common.cuh", "bulk.cuh", "ll.cuh", "entries.cu"]


def source():
    # As KERNEL_SOURCE (executor/src/cuda/mod.rs) concatenates it.
    return "".join(f'#line 1 "{f}"\n' + (KERNEL / f).read_text() for f in FILES)


nvrtc = ctypes.CDLL("libnvrtc.so.12")


def check(r, what, prog=None):
    if r != 0:
        log = ""
        if prog is not None:
            n = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
        sys.exit(f"nvrtc {what}: error {r}\n{log}")


def compile_once(src, opts, cubin):
    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"coll.cu", 0, None, None), "create")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    t = time.perf_counter()
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), arr), "compile", prog)
    dt = time.perf_counter() - t
    n = ctypes.c_size_t()
    get_size = nvrtc.nvrtcGetCUBINSize if cubin else nvrtc.nvrtcGetPTXSize
    check(get_size(prog, ctypes.byref(n)), "size")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return dt, n.value


def main():
    arch = sys.argv[1] if len(sys.argv) > 1 else "90"
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    extra = sys.argv[3:]
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(f"NVRTC {major.value}.{minor.value}, arch {arch}, best/median of {repeat}, extra {extra}")
    src = source().encode()
    cases = [
        ("all entries -> PTX compute", [f"--gpu-architecture=compute_{arch}"], False),
        ("all entries -> CUBIN sm", [f"--gpu-architecture=sm_{arch}"], True),
    ]
    for d in ["F32", "F16", "BF16", "I32", "F64", "I64", "U8"]:
        cases.append((f"{d.lower()} only -> CUBIN sm", [f"--gpu-architecture=sm_{arch}", f"-DCOLL_DTYPE_{d}"], True))
    cases.append(("f32 only -> PTX compute", [f"--gpu-architecture=compute_{arch}", "-DCOLL_DTYPE_F32"], False))
    only = [c for c in os.environ.get("CASES", "").split(",") if c]
    for name, opts, cubin in cases:
        if only and not any(c in name for c in only):
            continue
        times = []
        for _ in range(repeat):
            dt, size = compile_once(src, opts + ["-std=c++17"] + extra, cubin)
            times.append(dt)
        print(f"{name:28} best {min(times):6.2f} s  median {statistics.median(times):6.2f} s  {size / 1024:8.0f} KiB")


main()
