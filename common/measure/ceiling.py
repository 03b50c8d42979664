"""Measure the device's matmul ceiling, for MFU: what this card reaches, not its datasheet.

    python -m common.measure.ceiling [--if-missing]     # CUDA only; prints the figures and caches them

A large bf16 and a large TF32 matmul (8192 x 8192 x 8192), timed with CUDA events, median of 20
after a warm-up, cached under the GPU's name and the torch version (common.analysis.ceiling reads it).
The runners start it in a child process before their first CUDA run, so they never hold a CUDA context.
Datasheet peaks are leads; what a large matmul reaches on this card is the ceiling we divide by
(an H100 SXM reached about 798 TFLOP/s in bf16 on 2026-11-22).
"""
import datetime as dt
import json
import sys
from statistics import median

import torch

from common.analysis import ceiling
from common.analysis.results import Ceilings, atomic_write_text
from common.measure import stamp

SIZE, REPEATS = 8192, 20


def _time_matmul(dtype, tf32: bool) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)  # random data: zeros run faster than real data
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return 2 * SIZE ** 3 / median(times) / 1e12


def measure() -> Ceilings:
    found = Ceilings(gpu=torch.cuda.get_device_name(), bf16_tflops=_time_matmul(torch.bfloat16, False),
                     tf32_tflops=_time_matmul(torch.float32, True), fp32_tflops=_time_matmul(torch.float32, False),
                     how=f"{SIZE}^3 matmul, CUDA events, median of {REPEATS}",
                     date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    try:
        table = json.loads(ceiling.path().read_text())
    except (OSError, ValueError):
        table = {}
    table[ceiling.key(found.gpu, torch.__version__)] = found.to_json()
    atomic_write_text(ceiling.path(), json.dumps(table, indent=1) + "\n")
    return found


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("python -m common.measure.ceiling: error: the matmul ceiling needs CUDA", file=sys.stderr)
        sys.exit(2)
    if "--if-missing" in sys.argv[1:]:
        if ceiling.cached(stamp.take(torch.device("cuda"))) is not None:
            sys.exit(0)
        print("measuring this GPU's matmul ceiling once (bf16, TF32, fp32), for MFU ...", flush=True)
    c = measure()
    print(f"{c.gpu}: bf16 {c.bf16_tflops:.0f} TFLOP/s, TF32 {c.tf32_tflops:.0f}, fp32 {c.fp32_tflops:.0f} "
          f"({c.how}) -> {ceiling.path()}")
