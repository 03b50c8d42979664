"""Peak memory: allocator peaks on CUDA, the process's peak resident set on CPU."""
import resource
import sys

import torch


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> dict:
    if device.type == "cuda":
        return {
            "kind": "cuda_allocator",
            "max_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "max_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        }
    # ru_maxrss is KiB on Linux, bytes on macOS; it covers the whole process life (no reset)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return {"kind": "cpu_peak_rss", "peak_rss_mb": rss * scale / 2**20}


def headline_mb(mem: dict) -> float:
    """The one number a report compares: max allocated on CUDA, peak RSS on CPU."""
    return mem.get("max_allocated_mb", mem.get("peak_rss_mb", 0.0))
