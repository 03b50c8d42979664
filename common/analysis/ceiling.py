"""The device's measured ceilings, read back for MFU and the roofline: what this card (or this CPU, at
its thread count) reaches in a large matmul per dtype and in a large copy. `python -m
common.measure.ceiling` measures them once per machine and caches them in the data folder, under the
GPU's name (or the CPU's and its threads) and the torch version, with the machine's load while it
measured; this module only reads that cache, and takes a busy machine's ceilings for missing."""
import json

from common import env
from common.analysis.results_run import Ceilings, Stamp


def path():
    return env.data_dir() / "matmul_ceilings.json"


def key(gpu_name: str, torch_version: str) -> str:
    return f"{gpu_name} | torch {torch_version}"


def device_key(stamp: Stamp) -> str:
    """The cache's key for a stamp's device: the GPU's name, or the CPU's with the run's threads."""
    name = stamp.gpu_name if stamp.device_type == "cuda" else f"CPU {stamp.cpu} x{stamp.torch_threads} threads"
    return key(name, stamp.torch)


def cached(stamp: Stamp, cpu: bool = False) -> Ceilings | None:
    """The cached ceilings of the stamp's device, or None (not measured yet). A CPU's only when asked
    (`cpu`): MFU is a GPU's figure, the roofline is every device's."""
    if stamp.device_type != "cuda" and not cpu:
        return None
    try:
        found = json.loads(path().read_text()).get(device_key(stamp))
    except (OSError, ValueError):
        return None
    found = Ceilings.from_json(found) if found else None
    return None if found is not None and found.load is not None and found.load.busy else found  # measured again


def busy_reason(c: Ceilings | None) -> str | None:
    """Why a ceiling was not kept (measured on a busy machine), in words, else None."""
    return (f"its ceilings were measured while {c.load.words()}: not kept, measured again next run"
            if c is not None and c.load is not None and c.load.busy else None)


def peak_tflops(ceilings: Ceilings | None, dtype: str, tf32: bool = False) -> float | None:
    """The measured matmul ceiling for math in `dtype` ("float32" on the TF32 tensor cores when `tf32`).
    A dtype this device has no native ceiling for falls to the one it really runs at: bf16 emulated
    on a T4 runs no faster than fp32; fp16 from a cache written before fp16 was measured, at bf16's."""
    if ceilings is None:
        return None
    if dtype == "float16":
        return ceilings.fp16_tflops or ceilings.bf16_tflops
    if dtype == "bfloat16":
        return ceilings.bf16_tflops or ceilings.fp32_tflops
    if dtype == "float32" and tf32:
        return ceilings.tf32_tflops or ceilings.fp32_tflops
    return ceilings.fp32_tflops


def mfu(tflops: float | None, ceilings: Ceilings | None, dtype: str = "bfloat16", tf32: bool = False) -> float | None:
    """Achieved TFLOP/s over the measured matmul ceiling of the dtype the run's math ran in."""
    peak = peak_tflops(ceilings, dtype, tf32)
    if tflops is None or not peak:
        return None
    return tflops / peak
