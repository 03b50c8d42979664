"""Where a script reads a tensor on the host, by its own lines: during the doctor's profiled steps the
tensor methods that wait for the device are wrapped, and each call is counted at the innermost frame
of the script's own folder. Lines that never ran (a branch for another setting, a validation loop the
profiled steps did not reach) are never named, and on a GPU only reads of a GPU tensor count: a CPU
tensor's .item() (nanoGPT's batch indices) waits for nothing."""
import sys
from pathlib import Path

import torch

READS = ("item", "tolist", "cpu", "__int__", "__float__", "__bool__", "__index__")
EXPLICIT = ("item", "tolist")  # on a CPU run only these: int(t) of an index is ordinary there


class SyncLines:
    """install() before the profiled steps, uninstall() after them; `counts`: "file:line" -> calls."""

    def __init__(self, script: Path, cuda: bool):
        self.folder, self.cuda = Path(script).resolve().parent, cuda
        self.counts: dict[str, int] = {}
        self.steps = 0  # the steps it was installed for (the observer sets it)
        self._real = {}

    def _where(self) -> str | None:
        """The script's line: on a GPU the innermost of its frames (a library call it made may wait
        for the device); on a CPU only a read it makes itself (torch's own .item() of a CPU step
        count, inside an optimizer, waits for nothing a GPU run would)."""
        frame = sys._getframe(2)
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_absolute() and path.is_relative_to(self.folder) and "site-packages" not in path.parts:
                return f"{path.relative_to(self.folder)}:{frame.f_lineno}"
            frame = frame.f_back if self.cuda else None
        return None

    def install(self) -> None:
        for name in READS:
            real = self._real[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._wrap(name, real))

    def _wrap(self, name, real):
        counted = READS if self.cuda else EXPLICIT

        def read(tensor, *args, **kwargs):
            if name in counted and (tensor.is_cuda or not self.cuda):
                where = self._where()
                if where:
                    self.counts[where] = self.counts.get(where, 0) + 1
            return real(tensor, *args, **kwargs)

        return read

    def uninstall(self) -> None:
        for name, real in self._real.items():
            setattr(torch.Tensor, name, real)
        self._real = {}
