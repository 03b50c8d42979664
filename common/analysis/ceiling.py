"""The device's measured matmul ceiling, read back for MFU: achieved TFLOP/s over what this card reaches.
`python -m common.measure.ceiling` measures it once per machine (GPU name and torch version) and caches
it in the data folder; this module only reads that cache."""
import json

from common import env
from common.analysis.results import Stamp


def path():
    return env.data_dir() / "matmul_ceilings.json"


def key(gpu_name: str, torch_version: str) -> str:
    return f"{gpu_name} | torch {torch_version}"


def cached(stamp: Stamp) -> dict | None:
    """The cached ceilings of the stamp's GPU, or None (a CPU run, or not measured yet)."""
    if stamp.device_type != "cuda":
        return None
    try:
        return json.loads(path().read_text()).get(key(stamp.gpu_name, stamp.torch))
    except (OSError, ValueError):
        return None


def mfu(tflops: float | None, ceilings: dict | None, name: str = "bf16_tflops") -> float | None:
    if tflops is None or not ceilings or not ceilings.get(name):
        return None
    return tflops / ceilings[name]
