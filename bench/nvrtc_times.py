#!/usr/bin/env python3
"""Times NVRTC on the executor's interpreter kernel with no GPU: the whole source to PTX
(virtual compute_XX, what the driver then JIT-compiles at module load) and to CUBIN (real
sm_XX, loaded as is), and one element type's entries alone (the -DCOLL_DTYPE_<T> selection
a load compiled before it was split). Each case runs REPEAT times; the best and the median
are printed.

UNITS=f32,bf16 times instead the units a load of those element types compiles now (one
NVRTC program per operator and protocol, plus the avg scaling and barrier: the -DCOLL_OP_<OP>
-DCOLL_PROTO_<P> and -DCOLL_AUX selections of entries.cu): each unit alone (best and median
of REPEAT), their serial sum, then all units of the type compiled at once on each thread
count of THREADS (default: 1 and the machine's cores), as the executor does. Beside each
wall time, the compiling thread's CPU time (best of REPEAT), which other work on a shared
machine changes far less: the slowest unit's CPU time is what a load's wall time tends to
on a machine with a core per unit.
GRAIN=op makes the units one per operator (both protocols) instead.

usage: LD_LIBRARY_PATH=$(bash tests/scripts/nvrtc.sh) python3 bench/nvrtc_times.py \
           [ARCH=90] [REPEAT=3] [EXTRA NVRTC OPTION ...]
KERNEL_DIR=DIR times the kernel source in DIR instead (another revision's, for an A/B).
CASES=f32,all (substrings of the case names) runs only those cases.
"""
import concurrent.futures
import ctypes
import os
import pathlib
import statistics
import sys
import time

KERNEL = pathlib.Path(
    os.environ.get("KERNEL_DIR")
    or pathlib.Path(__file__).resolve().parent.parent / "executor/src/cuda/kernel")
FILES = ["abi.h", "common.cuh", "bulk.cuh", "ll.cuh", "multi.cuh", "entries.cu"]


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
    c = time.thread_time()
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), arr), "compile", prog)
    dt = time.perf_counter() - t
    compile_once.cpu = time.thread_time() - c
    n = ctypes.c_size_t()
    get_size = nvrtc.nvrtcGetCUBINSize if cubin else nvrtc.nvrtcGetPTXSize
    check(get_size(prog, ctypes.byref(n)), "size")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return dt, n.value


def units(dtype, grain):
    """(name, defines) of each unit of `dtype` a plan with no block of several peers loads,
    as the executor's KernelUnit lists them (the plain entries)."""
    d = [f"-DCOLL_DTYPE_{dtype.upper()}", "-DCOLL_ENTRIES_PLAIN"]
    out = []
    for op in ["sum", "prod", "min", "max"]:
        protos = [None] if grain == "op" else ["bulk", "ll", "ll128"]
        for proto in protos:
            extra = [] if proto is None else [f"-DCOLL_PROTO_{proto.upper()}"]
            name = f"{dtype}-{op}" + ("" if proto is None else f"-{proto}")
            out.append((name, d + [f"-DCOLL_OP_{op.upper()}"] + extra))
    out.append((f"{dtype}-aux", d + ["-DCOLL_AUX"]))
    return out


def time_units(src, arch, repeat, extra, dtypes):
    grain = os.environ.get("GRAIN", "proto")
    ncpu = os.cpu_count() or 1
    threads = [int(t) for t in os.environ.get("THREADS", f"1,{ncpu}").split(",") if t]
    base = [f"--gpu-architecture=sm_{arch}", "-std=c++17"] + extra
    for dtype in dtypes:
        us = units(dtype, grain)
        best = {}
        cpu = {}
        for name, defs in us:
            times, cpus = [], []
            for _ in range(repeat):
                times.append(compile_once(src, base + defs, True))
                cpus.append(compile_once.cpu)
            best[name] = min(t for t, _ in times)
            cpu[name] = min(cpus)
            med = statistics.median(t for t, _ in times)
            print(f"unit {name:16} best {best[name]:6.2f} s  median {med:6.2f} s  "
                  f"cpu {cpu[name]:6.2f} s  {times[0][1] / 1024:6.0f} KiB")
        print(f"{dtype}: {len(us)} units, serial sum of bests {sum(best.values()):6.2f} s, "
              f"slowest {max(best.values()):6.2f} s; CPU time: sum {sum(cpu.values()):6.2f} s, "
              f"slowest {max(cpu.values()):6.2f} s")
        for n in threads:
            walls = []
            for _ in range(repeat):
                t = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
                    list(pool.map(lambda u: compile_once(src, base + u[1], True), us))
                walls.append(time.perf_counter() - t)
            print(f"{dtype}: all {len(us)} units on {n:2} threads: wall best {min(walls):6.2f} s  median {statistics.median(walls):6.2f} s")


def main():
    arch = sys.argv[1] if len(sys.argv) > 1 else "90"
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    extra = sys.argv[3:]
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"NVRTC {major.value}.{minor.value}, arch {arch}, best/median of {repeat}, extra {extra}, "
          f"{os.cpu_count()} cores, load average {load}")
    src = source().encode()
    only_units = [u for u in os.environ.get("UNITS", "").split(",") if u]
    if only_units:
        time_units(src, arch, repeat, extra, only_units)
        return
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
        times, cpus = [], []
        for _ in range(repeat):
            dt, size = compile_once(src, opts + ["-std=c++17"] + extra, cubin)
            times.append(dt)
            cpus.append(compile_once.cpu)
        print(f"{name:28} best {min(times):6.2f} s  median {statistics.median(times):6.2f} s  "
              f"cpu {min(cpus):6.2f} s  {size / 1024:8.0f} KiB")


main()
