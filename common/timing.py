"""Per-step timing with no host sync inside a timed step.

On CUDA each step is bracketed by CUDA events that are only read after the loop (one synchronize
for the whole run); on CPU, time.perf_counter is the clock. Events record when the GPU reaches
them, so a step that waits for the CPU (data, launches) is still measured as wall time.
"""
import time

import torch


class StepTimer:
    def __init__(self, device: torch.device, steps: int):
        self.cuda = device.type == "cuda"
        self.steps = steps
        if self.cuda:
            # created up front so that no allocation happens inside the timed loop
            self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
            self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
        else:
            self.starts = [0.0] * steps
            self.ends = [0.0] * steps

    def start(self, i: int) -> None:
        if self.cuda:
            self.starts[i].record()
        else:
            self.starts[i] = time.perf_counter()

    def stop(self, i: int) -> None:
        if self.cuda:
            self.ends[i].record()
        else:
            self.ends[i] = time.perf_counter()

    def step_ms(self, n: int | None = None) -> list[float]:
        """Milliseconds per step for the first n steps; on CUDA this is the run's one sync point."""
        n = self.steps if n is None else n
        if self.cuda:
            torch.cuda.synchronize()  # note: this is a sync point, after the timed loop
            return [s.elapsed_time(e) for s, e in zip(self.starts[:n], self.ends[:n])]
        return [(e - s) * 1000.0 for s, e in zip(self.starts[:n], self.ends[:n])]


def synchronize(device: torch.device) -> None:
    """Wait for queued device work; used only between measured phases, never inside a step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
