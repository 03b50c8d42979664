"""Peak memory: allocator peaks on CUDA, the process's peak resident set on CPU."""
import resource
import sys

import torch

from common.analysis.results import Memory


def cuda_index(device: torch.device) -> int:
    """The run's GPU: a device without an index is the current one."""
    return device.index if device.index is not None else torch.cuda.current_device()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(cuda_index(device))


def peak(device: torch.device) -> Memory:
    if device.type == "cuda":
        index = cuda_index(device)
        return Memory(kind="cuda_allocator", peak_mb=torch.cuda.max_memory_allocated(index) / 2**20,
                      reserved_mb=torch.cuda.max_memory_reserved(index) / 2**20)
    # ru_maxrss is KiB on Linux, bytes on macOS; it covers the whole process life (no reset)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return Memory(kind="cpu_peak_rss", peak_mb=rss * scale / 2**20)


def timed_peak(device: torch.device, phase_timer=None) -> Memory:
    """The peak since reset_peak(). A phase timer (timing.PhaseTimer) resets the allocator's peaks
    at every phase, so with one on, the stretch's peaks are the highest it kept."""
    found = peak(device)
    if phase_timer is not None and phase_timer.peaks:
        found.peak_mb = max(found.peak_mb, *phase_timer.peaks.values())
        found.reserved_mb = max(found.reserved_mb or 0.0, phase_timer.reserved_peak_mb)
    return found


def cap(device: torch.device, gb: float) -> tuple[float | None, str]:
    """As on a card with `gb` of memory: the allocator refuses beyond it (an out-of-memory result).
    Returns the cap in effect (None on a CPU, which has none) and the notice that says so."""
    if device.type != "cuda":
        return None, f"--memory-budget-gb {gb:g}: a memory budget needs CUDA; ignored on a CPU"
    index = cuda_index(device)
    total = torch.cuda.get_device_properties(index).total_memory
    # the allocator's cap: the CUDA context and libraries' workspaces come on top of it
    torch.cuda.set_per_process_memory_fraction(min(1.0, gb * 1e9 / total), index)
    return gb, f"GPU memory capped at {gb:g} GB of {total / 1e9:.0f} GB (--memory-budget-gb)"
