"""What the NVIDIA tools see of a run: NVTX ranges for Nsight Systems and Nsight Compute (the `nvtx`
package when installed, else torch.cuda.nvtx), and the window of one step for a kernel profiler.

Ranges are only emitted on CUDA; on CPU they are no-ops and the run's notices say so once.
"""
import contextlib

import torch

try:  # optional at import time: the device image may not have it
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the machine
    _nvtx = None

_DOMAIN = "cookbook"


def backend(device: torch.device) -> str:
    if device.type != "cuda":
        return "off"
    return "nvtx" if _nvtx is not None else "torch.cuda.nvtx"


class Ranges:
    def __init__(self, device: torch.device):
        self.kind = backend(device)
        if self.kind == "nvtx":
            self._push = lambda name: _nvtx.push_range(name, domain=_DOMAIN)
            self._pop = lambda: _nvtx.pop_range(domain=_DOMAIN)
        elif self.kind == "torch.cuda.nvtx":
            self._push = torch.cuda.nvtx.range_push
            self._pop = torch.cuda.nvtx.range_pop

    @contextlib.contextmanager
    def range(self, name: str):
        if self.kind == "off":
            yield
            return
        self._push(name)
        try:
            yield
        finally:
            self._pop()


@contextlib.contextmanager
def kernel_window(device: torch.device, active: bool):
    """cudaProfilerStart/Stop around one step, for `ncu --profile-from-start off`: every kernel of the
    step, the backward's too (autograd launches those from its own thread, outside this thread's NVTX
    ranges). A no-op unless active on CUDA."""
    if not active or device.type != "cuda":
        yield
        return
    torch.cuda.profiler.start()
    try:
        yield
    finally:
        torch.cuda.profiler.stop()
