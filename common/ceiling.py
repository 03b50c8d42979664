"""The device's measured matmul ceiling, for MFU: achieved TFLOP/s over what this card reaches.

    python -m common.ceiling            # measure (CUDA) and cache; prints the figures

A large bf16 and a large TF32 matmul (8192 x 8192 x 8192), timed with CUDA events, median of 20
after a warm-up. Measured once per machine and cached in the data folder under the GPU's name and
the torch version: the runners measure it, in a child process, before their first CUDA run.
Datasheet peaks are leads; what a large matmul reaches on this card is the ceiling we divide by
(an H100 SXM reached about 798 TFLOP/s in bf16 on 2026-11-22).
"""
import json
import sys
from statistics import median

from common import datasource
from common.results import Stamp, atomic_write_text

SIZE, REPEATS = 8192, 20


def _path():
    return datasource.data_dir() / "matmul_ceilings.json"


def _key(gpu_name: str, torch_version: str) -> str:
    return f"{gpu_name} | torch {torch_version}"


def cached(stamp: Stamp) -> dict | None:
    """The cached ceilings of the stamp's GPU, or None (a CPU run, or not measured yet)."""
    if stamp.device_type != "cuda":
        return None
    try:
        return json.loads(_path().read_text()).get(_key(stamp.gpu_name, stamp.torch))
    except (OSError, ValueError):
        return None


def _time_matmul(dtype, tf32: bool) -> float:
    import torch

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


def measure() -> dict:
    import datetime as dt

    import torch

    found = {"gpu": torch.cuda.get_device_name(), "bf16_tflops": _time_matmul(torch.bfloat16, False),
             "tf32_tflops": _time_matmul(torch.float32, True), "fp32_tflops": _time_matmul(torch.float32, False),
             "how": f"{SIZE}^3 matmul, CUDA events, median of {REPEATS}",
             "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        table = json.loads(_path().read_text())
    except (OSError, ValueError):
        table = {}
    table[_key(found["gpu"], torch.__version__)] = found
    atomic_write_text(_path(), json.dumps(table, indent=1) + "\n")
    return found


def ensure(cuda: bool) -> None:
    """Measure in a child process unless cached: the runner itself never holds a CUDA context."""
    if cuda:
        import subprocess

        from common.env import REPO_ROOT

        subprocess.run([sys.executable, "-m", "common.ceiling", "--if-missing"], cwd=REPO_ROOT, check=False)


def mfu(tflops: float | None, ceilings: dict | None, key: str = "bf16_tflops") -> float | None:
    if tflops is None or not ceilings or not ceilings.get(key):
        return None
    return tflops / ceilings[key]


if __name__ == "__main__":
    import torch

    if not torch.cuda.is_available():
        print("python -m common.ceiling: error: the matmul ceiling needs CUDA", file=sys.stderr)
        sys.exit(2)
    if "--if-missing" in sys.argv[1:]:
        from common import env

        if cached(env.stamp(torch.device("cuda"))) is not None:
            sys.exit(0)
        print("measuring this GPU's matmul ceiling once (bf16, TF32, fp32), for MFU ...", flush=True)
    c = measure()
    print(f"{c['gpu']}: bf16 {c['bf16_tflops']:.0f} TFLOP/s, TF32 {c['tf32_tflops']:.0f}, fp32 {c['fp32_tflops']:.0f} "
          f"({c['how']}) -> {_path()}")
