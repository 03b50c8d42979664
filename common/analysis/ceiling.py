"""The device's measured matmul ceiling, read back for MFU: achieved TFLOP/s over what this card reaches.
`python -m common.measure.ceiling` measures it once per machine (GPU name and torch version) and caches
it in the data folder; this module only reads that cache."""
import json

from common import env
from common.analysis.results import Ceilings, Stamp


def path():
    return env.data_dir() / "matmul_ceilings.json"


def key(gpu_name: str, torch_version: str) -> str:
    return f"{gpu_name} | torch {torch_version}"


def cached(stamp: Stamp) -> Ceilings | None:
    """The cached ceilings of the stamp's GPU, or None (a CPU run, or not measured yet)."""
    if stamp.device_type != "cuda":
        return None
    try:
        found = json.loads(path().read_text()).get(key(stamp.gpu_name, stamp.torch))
    except (OSError, ValueError):
        return None
    return Ceilings.from_json(found) if found else None


def mfu(tflops: float | None, ceilings: Ceilings | None) -> float | None:
    """Achieved TFLOP/s over the measured bf16 matmul ceiling."""
    if tflops is None or ceilings is None or not ceilings.bf16_tflops:
        return None
    return tflops / ceilings.bf16_tflops
