"""The environment stamp carried by every result: hardware, software versions, date, commit."""
import datetime as dt
import os
import platform

import torch

from common import env
from common.analysis.results_run import Stamp
from common.measure import device as device_profile
from common.measure import tf32


def _driver_version() -> str | None:
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _torchvision_version() -> str | None:
    try:
        import torchvision

        return torchvision.__version__
    except Exception:
        return None


def take(device: torch.device) -> Stamp:
    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return Stamp(**{
        "device_type": device.type,
        "gpu_name": props.name if cuda else None,
        "gpu_memory_gb": round(props.total_memory / 1e9, 1) if cuda else None,
        "driver": _driver_version() if cuda else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        # what "fp32" means on Ampere and newer, read so that a script using either API cannot make it raise
        "tf32_matmul": tf32.state()[0],
        "tf32_cudnn": tf32.state()[1],
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "float32_matmul_precision": tf32.float32_matmul_precision(),
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
        "python": platform.python_version(),
        "cpu": env.cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_set": env.cpu_set(),
        "torch_threads": torch.get_num_threads(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": env.git_commit(),
        "profile": device_profile.profile(device),
    })
