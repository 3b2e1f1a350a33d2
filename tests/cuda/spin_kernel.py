"""A CUDA program that times a compute-bound kernel, for the compute split under MPS.

It needs the driver's own library only (``libcuda.so.1`` through ctypes, the kernel as PTX that
the driver compiles), so no CUDA framework: run it as ``python -c PROGRAM BLOCKS ITERS LAUNCHES``.
Every thread of ``BLOCKS`` blocks of 256 runs a chain of ``ITERS`` dependent FMAs, so the kernel's
time is the SMs it gets: with half of them (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50``) it takes
about twice as long, and beside another such program on the other half, no longer than alone.

The program prints ``ready`` once its context and kernel are loaded and one warm-up launch is
done, waits for a line on stdin (so that two programs can start their timed launches together),
then times ``LAUNCHES`` launches (each to its end) and prints their milliseconds as one JSON list.
A driver call that fails ends it with the call and its ``CUresult``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Sequence

#: 256 threads a block; the kernel reads ``out`` (a float per thread) and ``iters``
PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin(
    .param .u64 spin_param_0,
    .param .u32 spin_param_1
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [spin_param_0];
    ld.param.u32 %r1, [spin_param_1];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    cvt.rn.f32.s32 %f1, %r5;
    mov.f32 %f2, 0f3F7FFFFE;
    mov.u32 %r6, 0;
$L_loop:
    fma.rn.f32 %f1, %f1, %f2, 0f3F800000;
    add.s32 %r6, %r6, 1;
    setp.lt.u32 %p1, %r6, %r1;
    @%p1 bra $L_loop;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r5, 4;
    add.s64 %rd2, %rd2, %rd3;
    st.global.f32 [%rd2], %f1;
    ret;
}
"""

PROGRAM = (
    "PTX = "
    + repr(PTX)
    + "\n"
    + r"""
import ctypes, json, sys, time
blocks, iters, launches = (int(a) for a in sys.argv[1:4])
threads = 256
cuda = ctypes.CDLL("libcuda.so.1")
def check(result, call):
    if result:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(name))
        sys.exit(f"{call} failed: CUresult {result} ({(name.value or b'?').decode()})")
check(cuda.cuInit(0), "cuInit")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
context = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
module = ctypes.c_void_p()
check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX.encode())), "cuModuleLoad")
function = ctypes.c_void_p()
check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
out = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(blocks * threads * 4)), "cuMemAlloc")
count = ctypes.c_uint32(iters)
params = (ctypes.c_void_p * 2)(
    ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
    ctypes.cast(ctypes.byref(count), ctypes.c_void_p),
)
cuda.cuLaunchKernel.argtypes = [
    ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
    ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
]
def launch():
    check(cuda.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, None, params, None),
          "cuLaunchKernel")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
launch()
print("ready", flush=True)
sys.stdin.readline()
times = []
for _ in range(launches):
    start = time.perf_counter()
    launch()
    times.append((time.perf_counter() - start) * 1000)
print(json.dumps(times), flush=True)
"""
)


def median_ms(line: str) -> float:
    """The median of the milliseconds the program printed."""
    times: Sequence[float] = json.loads(line)
    return statistics.median(times)


def time_together(
    python: str, envs: Sequence[dict[str, str]], blocks: int, iters: int, launches: int
) -> list[float]:
    """Start one program per environment, let them start their timed launches together, and
    return each one's median milliseconds. Raises ``RuntimeError`` with its stderr when one fails.
    """
    argv = [python, "-c", PROGRAM, str(blocks), str(iters), str(launches)]
    pipe = subprocess.PIPE
    programs = [
        subprocess.Popen(argv, env=env, text=True, stdin=pipe, stdout=pipe, stderr=pipe)
        for env in envs
    ]
    try:
        for program in programs:
            assert program.stdout is not None
            if program.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the CUDA program failed: {program.communicate()[1]}")
        for program in programs:
            assert program.stdin is not None
            program.stdin.write("go\n")
            program.stdin.flush()
        medians = []
        for program in programs:
            assert program.stdout is not None
            line = program.stdout.readline()
            if not line:
                raise RuntimeError(f"the CUDA program failed: {program.communicate()[1]}")
            medians.append(median_ms(line))
        return medians
    finally:
        for program in programs:
            program.kill()
            program.communicate()
