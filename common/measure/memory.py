"""Peak memory: allocator peaks on CUDA, the process's peak resident set on CPU; and the allocator's
history recorded up to an out-of-memory error (the doctor's second run of a script that ran out)."""
import contextlib
import os
import pickle
import resource
import sys
from pathlib import Path

import torch

from common.analysis.results_run import Memory


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


HISTORY_ENTRIES = 100_000


def record_history(max_entries: int = HISTORY_ENTRIES) -> None:
    """The CUDA allocator's history from here on, each event with its Python stack only: torch's default
    also symbolizes C++ frames, and a snapshot of a long run then took minutes to dump."""
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")


def how_to_view(snapshot: Path) -> str:
    """How to open an allocator snapshot: PyTorch's memory viewer, or its HTML rendering offline."""
    snapshot = Path(snapshot)
    return (f"open https://pytorch.org/memory_viz and drop {snapshot.name} on it, or offline "
            f"python -m torch.cuda._memory_viz trace_plot {snapshot} -o {snapshot.with_suffix('.html')}")


ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch reads either


def expandable_segments(recorder: "OomRecorder | None" = None) -> bool:
    """Whether the allocator grows its segments (expandable_segments): as its snapshot recorded it,
    else as the environment set it (a script may set it in code; only the snapshot sees that)."""
    if recorder is not None and "expandable_segments" in recorder.settings:
        return bool(recorder.settings["expandable_segments"])
    return any("expandable_segments:true" in os.environ.get(v, "").replace(" ", "").lower() for v in ALLOC_CONF)


class OomRecorder:
    """On CUDA, the allocator's history recorded from the script's first CUDA use (each allocation and
    free with its Python stack, the last MAX_ENTRIES), and the snapshot dumped once the script's
    out-of-memory reaches the doctor (at_error). Set up as CUDA initialises (torch.cuda._lazy_call), never
    before: a script that chooses its GPUs (CUDA_VISIBLE_DEVICES) or forks first still may. The
    allocator's out-of-memory observer keeps the figures of the last failed allocation (a cuDNN
    workspace that halves and retries, a script that catches its OOM and tries smaller: each fails
    before the one that ends the script). What the allocator never sees fails elsewhere, and then the
    figures are read where the error is caught: a library handle's creation, NCCL's buffers, the CUDA
    context. Recording slows every allocation: never over measured steps."""

    MAX_ENTRIES = 100_000

    def __init__(self, path: Path):
        self.path, self.seen, self.failures = Path(path), None, 0
        self.unavailable: str | None = None  # why there is no history, once CUDA said
        self.observer_failed: str | None = None
        self.settings: dict = {}  # the allocator's settings, as its snapshot records them
        torch.cuda._lazy_call(self._start)

    def _start(self) -> None:
        try:  # run inside CUDA's initialisation: an error here would become the script's
            if torch.cuda.get_allocator_backend() != "native":
                self.unavailable = (f"the allocator is {torch.cuda.get_allocator_backend()} "
                                    f"({' or '.join(ALLOC_CONF)}), which records no history")
                return
            record_history(self.MAX_ENTRIES)
            torch._C._cuda_attach_out_of_memory_observer(self._observe)
        except Exception as e:
            self.unavailable = f"the allocator's history could not be recorded ({type(e).__name__}: {e})"

    def _observe(self, device: int, requested: int, allowed: int, free: int) -> None:
        # c10's CUDACachingAllocator calls this, its lock released, with the segment it tried to reserve
        # (the request rounded up), the memory it may use (the device's, or the fraction's cap) and CUDA's
        # free bytes; an exception here would replace the script's OutOfMemoryError, so none leaves
        try:
            self.failures += 1
            self.seen = {"device": device, "requested": requested, "allowed": allowed, "free": free,
                         **_held(device)}
        except Exception as e:  # (a KeyboardInterrupt, the doctor's time limit, still ends the script)
            self.seen, self.observer_failed = None, f"{type(e).__name__}: {e}"

    def at_error(self) -> str | None:
        """The snapshot's path, dumped now (the history up to the error, the failed request's entry in
        it), or None where there is none (why: `unavailable`). Recording stops."""
        if self.unavailable or not torch.cuda.is_initialized():
            self.unavailable = self.unavailable or "the script ran out of memory before it used CUDA"
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_name(f".{self.path.name}.part")
            snapshot = torch.cuda.memory._snapshot()
            self.settings = snapshot.get("allocator_settings") or {}
            with open(part, "wb") as f:
                pickle.dump(snapshot, f)
            part.replace(self.path)  # a half-written snapshot is never taken for one
            return str(self.path)
        except Exception as e:  # the report says why; the OOM is still reported
            self.unavailable = f"the snapshot could not be written ({type(e).__name__}: {e})"
            return None
        finally:
            with contextlib.suppress(Exception):
                torch.cuda.memory._record_memory_history(enabled=None)


def _held(device: int) -> dict:
    """The caching allocator's memory on a device: in tensors, reserved, and free inside split blocks
    it cannot release (what a request larger than each of them cannot use: fragmentation)."""
    stats = torch.cuda.memory_stats(device)
    return {**{key: stats.get(f"{key}_bytes.all.current", 0) for key in ("allocated", "reserved", "inactive_split")},
            "inactive_split_large": stats.get("inactive_split_bytes.large_pool.current", 0)}


def figures_at_error(message: str) -> dict:
    """The figures read where an out-of-memory error was caught (no observer saw it fail): on the GPU
    the message names, else the current one; what the process may use, the fraction's cap applied."""
    import re

    named = re.search(r"GPU (\d+)", message)
    device = int(named.group(1)) if named else torch.cuda.current_device()
    fraction = torch.cuda.get_per_process_memory_fraction(device)
    return {"device": device, "requested": None, "free": torch.cuda.mem_get_info(device)[0],
            "allowed": torch.cuda.get_device_properties(device).total_memory * fraction, **_held(device)}
