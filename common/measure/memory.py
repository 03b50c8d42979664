"""Peak memory: allocator peaks on CUDA, the process's peak resident set on CPU; and the allocator's
history recorded up to an out-of-memory error (the doctor's second run of a script that ran out)."""
import pickle
import resource
import sys
from pathlib import Path

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


def how_to_view(snapshot: Path) -> str:
    """How to open an allocator snapshot: PyTorch's memory viewer, or its HTML rendering offline."""
    snapshot = Path(snapshot)
    return (f"open https://pytorch.org/memory_viz and drop {snapshot.name} on it, or offline "
            f"python -m torch.cuda._memory_viz trace_plot {snapshot} -o {snapshot.with_suffix('.html')}")


class OomRecorder:
    """On CUDA, the allocator's history recorded from the start (allocations with their Python and C++
    stacks, the last MAX_ENTRIES), and a snapshot dumped at the first out-of-memory: by the allocator's
    out-of-memory observer, which runs before the error is raised, while every tensor live at the failure
    still is; or, for an error the allocator did not raise (a cuBLAS or cuDNN workspace), by at_error()
    where the script's error is caught. Recording slows every allocation: never over timed steps."""

    MAX_ENTRIES = 100_000

    def __init__(self, path: Path):
        self.path, self.seen = Path(path), None
        torch.cuda.memory._record_memory_history(max_entries=self.MAX_ENTRIES)
        torch._C._cuda_attach_out_of_memory_observer(self._observe)

    def _observe(self, device: int, requested: int, allowed: int, free: int) -> None:
        # c10's CUDACachingAllocator calls this, its lock released, with the failed request's bytes, the
        # memory it may use (the device's, or the fraction's cap) and CUDA's free bytes
        if self.seen is None:  # the first: a script that catches its OOM and retries smaller fails again
            self.seen = {"device": device, "requested": requested, "allowed": allowed, "free": free,
                         "allocated": torch.cuda.memory_allocated(device),
                         "reserved": torch.cuda.memory_reserved(device)}
            self._dump()

    def _dump(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)

    def at_error(self) -> str | None:
        """The snapshot's path once the script's OOM reached the doctor (dumped now if the allocator's
        observer never ran), or None where it could not be written (said on stderr)."""
        try:
            if not self.path.exists():
                self._dump()
            return str(self.path)
        except Exception as e:  # the report says the snapshot is missing; the OOM is still reported
            print(f"[cookbook] memory snapshot not written: {type(e).__name__}: {e}", file=sys.stderr)
            return None
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
