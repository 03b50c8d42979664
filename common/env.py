"""The environment stamp carried by every result: hardware, software versions, date, commit."""
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

import torch

from common.results import Stamp

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_id() -> str:
    """A name for one invocation's results folder: UTC time and pid, so that runs never collide."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


def shown_path(path) -> str:
    """A path as a reader can use it: relative to the repository when it lies inside it."""
    p = Path(path)
    return str(p.relative_to(REPO_ROOT)) if p.is_absolute() and p.is_relative_to(REPO_ROOT) else str(p)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str:
    commit = _git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return commit


def cpu_set() -> list[int]:
    """The cores this process may run on (the runner pins every child to the same set)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


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


def stamp(device: torch.device) -> Stamp:
    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return Stamp(**{
        "device_type": device.type,
        "gpu_name": props.name if cuda else None,
        "gpu_memory_gb": round(props.total_memory / 1e9, 1) if cuda else None,
        "driver": _driver_version() if cuda else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        # defaults that change what "fp32" means on Ampere and newer
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_set": cpu_set(),
        "torch_threads": torch.get_num_threads(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    })


def describe_device(env: Stamp) -> str:
    """A one-line label; CPU results always say CPU."""
    if env.device_type == "cuda":
        return f"{env.gpu_name} (driver {env.driver or '?'}, CUDA {env.cuda})"
    return f"CPU: {env.cpu} x{env.cpu_count} (not a GPU result)"


def cpu_ranges(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5'"""
    out, cpus = [], sorted(cpus)
    for c in cpus:
        if out and c == out[-1][1] + 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)
