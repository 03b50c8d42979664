"""The device's measured ceilings, read back for MFU and the roofline: what this card (or this CPU, at
its thread count) reaches in a large matmul per dtype and in a large copy. `python -m
common.measure.ceiling` measures them once per machine and caches them in the data folder, under the
GPU's name (or the CPU's and its threads) and the torch version; this module only reads that cache."""
import json

from common import env
from common.analysis.results import Ceilings, Stamp


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
    return Ceilings.from_json(found) if found else None


def mfu(tflops: float | None, ceilings: Ceilings | None) -> float | None:
    """Achieved TFLOP/s over the measured bf16 matmul ceiling."""
    if tflops is None or ceilings is None or not ceilings.bf16_tflops:
        return None
    return tflops / ceilings.bf16_tflops
