"""Measure the device's ceilings, for MFU and the roofline: what this card (or CPU) reaches, not its
datasheet.

    python -m common.measure.ceiling [--if-missing] [--device cuda|cpu]   # prints the figures, caches them

A large matmul in each dtype this device runs natively (device profile: bf16 and TF32 from sm_80,
fp16 from sm_70, fp32 always; a CPU's bf16 and fp32), 8192^3 on a GPU, 1024^3 on a CPU at the
process's threads, and a large copy (1 GiB on a GPU, device to device; 256 MiB on a CPU), each timed (CUDA events, or
perf_counter), median of several after a warm-up, cached under the device's name and the torch
version (common.analysis.ceiling reads it). The runners measure a GPU in a child process before
their first CUDA run, so they never hold a CUDA context; a CPU run measures its own once, after its
profiled steps (ensure). Datasheet peaks are leads; what a large matmul and a large copy reach here
are the ceilings we divide by (an H100 SXM reached about 798 TFLOP/s in bf16 on 2026-11-22).
"""
import datetime as dt
import json
import sys
import time
from statistics import median

import torch

from common import env
from common.analysis import ceiling
from common.analysis.results_run import Ceilings
from common.files import atomic_write_text, file_lock
from common.measure import contention, stamp
from common.measure import device as device_profile

SIZES = {"cuda": 8192, "cpu": 1024}
COPY_BYTES = {"cuda": 2**30, "cpu": 2**28}
REPEATS = {"cuda": 20, "cpu": 5}
CPU_DTYPES = ["bfloat16", "float32"]


def _timed(device: torch.device, fn, repeats: int) -> float:
    """The median seconds of fn() after a warm-up."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return median(times)


def _matmul_tflops(device: torch.device, dtype, tf32_on: bool) -> float:
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32_on else "ieee"
    n = SIZES[device.type]
    a = torch.randn(n, n, device=device, dtype=dtype)  # random data: zeros run faster than real data
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / _timed(device, lambda: a @ b, REPEATS[device.type]) / 1e12


def _copy_gbs(device: torch.device) -> float:
    """A large copy's bytes read and written per second."""
    n = COPY_BYTES[device.type] // 4
    src, dst = torch.randn(n, device=device), torch.empty(n, device=device)
    return 2 * n * 4 / _timed(device, lambda: dst.copy_(src), REPEATS[device.type]) / 1e9


def measure(device: torch.device) -> Ceilings:
    """The ceilings of this hardware: a simulated profile (env.DEVICE_PROFILE_ENV) changes what a run
    chooses, never what its device reaches, so a CPU is measured as a CPU."""
    dtypes = device_profile.profile(device, simulate=False).ceiling_dtypes if device.type == "cuda" else CPU_DTYPES
    before = torch.backends.cuda.matmul.fp32_precision  # fp32_precision, never allow_tf32 (common.measure.tf32)
    measured = {}
    try:
        with contention.Window() as window:  # the load it was measured under: a busy machine's are not reused
            for name in dtypes:  # tf32: float32 on the TF32 tensor cores
                dtype = torch.float32 if name == "tf32" else getattr(torch, name)
                measured[name] = _matmul_tflops(device, dtype, name == "tf32")
            bandwidth = _copy_gbs(device)
    finally:
        torch.backends.cuda.matmul.fp32_precision = before
    found = Ceilings(gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU {env.cpu_model()}",
                     bf16_tflops=measured.get("bfloat16"), fp16_tflops=measured.get("float16"),
                     tf32_tflops=measured.get("tf32"), fp32_tflops=measured.get("float32"),
                     bandwidth_gbs=bandwidth, load=window.load,
                     how=f"{SIZES[device.type]}^3 matmuls ({', '.join(dtypes)}) and a "
                         f"{COPY_BYTES[device.type] // 2**20} MiB copy, median of {REPEATS[device.type]}"
                         + (f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""),
                     date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    with file_lock(ceiling.path().with_suffix(".lock")):  # runs measuring at once each add their own
        try:
            table = json.loads(ceiling.path().read_text())
        except (OSError, ValueError):
            table = {}
        table[ceiling.device_key(stamp.take(device))] = found.to_json()
        ceiling.path().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(ceiling.path(), json.dumps(table, indent=1) + "\n")
    return found


def ensure(device: torch.device) -> Ceilings:
    """The device's cached ceilings, measured first if missing (under a lock: once per machine)."""
    here = stamp.take(device)
    found = ceiling.cached(here, cpu=True)
    if found is not None:
        return found
    with file_lock(ceiling.path().with_suffix(".measuring")):
        return ceiling.cached(here, cpu=True) or measure(device)


def for_run(device: torch.device) -> Ceilings | None:
    """The ceilings a measured process divides by. A GPU's are only read from the cache: measuring
    them there (a 1 GiB copy, 8192^3 matmuls) could run the job itself out of memory, so the
    runners measure them first in a child (launch.ensure_ceiling); a CPU's are measured once if missing."""
    if device.type == "cuda":
        return ceiling.cached(stamp.take(device))
    return ensure(device)


if __name__ == "__main__":
    args = sys.argv[1:]
    which = torch.device(args[args.index("--device") + 1] if "--device" in args else "cuda")
    if which.type == "cuda" and not torch.cuda.is_available():
        print("python -m common.measure.ceiling: error: --device cuda needs CUDA (--device cpu measures this CPU)",
              file=sys.stderr)
        sys.exit(2)
    if "--if-missing" in args:
        if ceiling.cached(stamp.take(which), cpu=True) is not None:
            sys.exit(0)
        print(f"measuring this {'GPU' if which.type == 'cuda' else 'CPU'}'s ceilings once (matmuls, a copy), for MFU "
              "and the roofline ...", flush=True)
    c = measure(which)
    tflops = ", ".join(f"{name} {value:.3g}" for name, value in (("bf16", c.bf16_tflops), ("fp16", c.fp16_tflops),
                                                                 ("TF32", c.tf32_tflops), ("fp32", c.fp32_tflops))
                       if value)
    print(f"{c.gpu}: {tflops} TFLOP/s, copy {c.bandwidth_gbs:.0f} GB/s ({c.how}) -> {ceiling.path()}")
