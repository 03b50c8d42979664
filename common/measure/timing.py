"""Per-step timing with no host sync inside a timed step.

On CUDA each step is bracketed by CUDA events that are only read after the loop (one synchronize
for the whole run); on CPU, time.perf_counter is the clock. Events record when the GPU reaches
them, so a step that waits for the CPU (data, launches) is still measured as wall time.
"""
import time

import numpy as np
import torch


def _record(event, device: torch.device) -> None:
    """On the current stream of the run's device, which need not be the current device (a script on
    cuda:1 without set_device): an event belongs to the device of its first stream."""
    event.record(torch.cuda.current_stream(device))


def _events(n: int, device: torch.device) -> list:
    """n timing events, each recorded once now: CUDA creates an event on its first record, and that
    creation (cudaEventCreate) must not happen inside a timed step."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for e in events:
        _record(e, device)
    return events


class StepTimer:
    def __init__(self, device: torch.device, steps: int):
        self.cuda, self.device = device.type == "cuda", device
        self.steps = steps
        if self.cuda:
            # created up front so that no allocation happens inside the timed loop
            self.starts, self.ends = _events(steps, device), _events(steps, device)
        else:
            self.starts = [0.0] * steps
            self.ends = [0.0] * steps

    def start(self, i: int) -> None:
        if self.cuda:
            _record(self.starts[i], self.device)
        else:
            self.starts[i] = time.perf_counter()

    def stop(self, i: int) -> None:
        if self.cuda:
            _record(self.ends[i], self.device)
        else:
            self.ends[i] = time.perf_counter()

    def step_ms(self, n: int | None = None) -> list[float]:
        """Milliseconds per step for the first n steps; on CUDA this is the run's one sync point."""
        n = self.steps if n is None else n
        if self.cuda:
            torch.cuda.synchronize(self.device)  # note: this is a sync point, after the timed loop
            return [s.elapsed_time(e) for s, e in zip(self.starts[:n], self.ends[:n])]
        return [(e - s) * 1000.0 for s, e in zip(self.starts[:n], self.ends[:n])]

    def stretch_ms(self, n: int) -> float:
        """The wall time from the first step's start to the n-th step's end, over n: the mean step of
        the stretch (the process's figure); call after step_ms(), which synchronizes."""
        if self.cuda:
            return self.starts[0].elapsed_time(self.ends[n - 1]) / n
        return (self.ends[n - 1] - self.starts[0]) * 1000.0 / n


def synchronize(device: torch.device) -> None:
    """Wait for queued device work; used only between measured phases, never inside a step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Per-phase time of every timed step: CUDA events recorded on entering and leaving a phase
    (no sync; read after the loop), or perf_counter on CPU. A phase entered twice in a step adds up.
    On a GPU an event pair measures when the GPU reached each point, so a phase the host spends
    waiting (for data, say) shows as GPU time too: the GPU had nothing else to do."""

    def __init__(self, device: torch.device):
        self.cuda, self.device = device.type == "cuda", device
        self.marks = []  # (step, phase, start, end)

        self.peaks = {}  # phase -> the highest allocator peak seen inside it (CUDA), MB
        self.reserved_peak_mb = 0.0  # the highest reserved peak over every phase (CUDA)

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            _record(event, self.device)
            return event
        return time.perf_counter()

    def start(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)  # host-side allocator counters: no sync
        return self._mark()

    def stop(self, step: int, phase: str, started) -> None:
        self.marks.append((step, phase, started, self._mark()))
        if self.cuda:
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), peak)
            # start() resets the peaks at every phase, so the run's reserved peak is kept here too
            self.reserved_peak_mb = max(self.reserved_peak_mb, torch.cuda.max_memory_reserved(self.device) / 2**20)

    def phase_ms(self) -> dict[str, list[float]]:
        """phase -> milliseconds per timed step (steps where the phase did not run count 0)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)  # note: a sync point, after the timed loop
        steps = 1 + max((m[0] for m in self.marks), default=-1)
        out = {}
        for step, phase, a, b in self.marks:
            ms = a.elapsed_time(b) if self.cuda else (b - a) * 1000.0
            out.setdefault(phase, [0.0] * steps)[step] += ms
        return out


class DataTimer:
    """Around next(batches) in every timed step: the host's time inside it, and on CUDA the GPU's
    time between an event recorded before it and one after it.

    The host's time is not the data wait on a GPU: when the launch queue is full, the host blocks
    in whatever call comes next, next(batches) included, while the GPU is busy. The events measure
    what the GPU did meanwhile: it reaches the first event when the previous step's work is done,
    and the second once the host has produced the batch (plus any kernels that made it). So their
    gap is the GPU waiting for data; for a pipeline already on the GPU it is its few small kernels."""

    def __init__(self, device: torch.device, steps: int):
        self.cuda, self.device = device.type == "cuda", device
        self.host = [0.0] * steps
        self._t = 0.0
        if self.cuda:
            self.before, self.after = _events(steps, device), _events(steps, device)

    def start(self, i: int) -> None:
        if self.cuda:
            _record(self.before[i], self.device)
        self._t = time.perf_counter()

    def stop(self, i: int) -> None:
        self.host[i] = time.perf_counter() - self._t
        if self.cuda:
            _record(self.after[i], self.device)

    def host_ms(self) -> list[float]:
        return [h * 1000.0 for h in self.host]

    def device_ms(self) -> list[float] | None:
        """The GPU's time between the events; call after the timed loop's synchronize."""
        if not self.cuda:
            return None
        return [a.elapsed_time(b) for a, b in zip(self.before, self.after)]

    def shares(self, step_ms: list[float], wall_s: float) -> tuple[float, float | None, float | None]:
        return data_shares(self.host_ms(), self.device_ms(), step_ms, wall_s)


def data_shares(host_ms: list[float], device_ms: list[float] | None, step_ms: list[float],
                wall_s: float) -> tuple[float, float | None, float | None]:
    """The host's median ms fetching batches, its share of the stretch's wall time, and the share of
    the step time the device waited for data: on CUDA the GPU's time across the fetch (`device_ms`;
    the host's includes blocking on a full launch queue), on a CPU the host's share."""
    host_share = sum(host_ms) / (wall_s * 1000) if wall_s else None
    total_ms = sum(step_ms)
    wait_share = host_share if device_ms is None else (sum(device_ms) / total_ms if total_ms else None)
    return float(np.median(host_ms)), host_share, wait_share
