"""Peak memory: allocator peaks on CUDA, the process's peak resident set on CPU."""
import resource
import sys

import torch

from common.analysis.results import Memory


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> Memory:
    if device.type == "cuda":
        return Memory(kind="cuda_allocator", peak_mb=torch.cuda.max_memory_allocated(device) / 2**20,
                      reserved_mb=torch.cuda.max_memory_reserved(device) / 2**20)
    # ru_maxrss is KiB on Linux, bytes on macOS; it covers the whole process life (no reset)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return Memory(kind="cpu_peak_rss", peak_mb=rss * scale / 2**20)

