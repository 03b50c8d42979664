"""Where a script reads a tensor on the host, by its own lines: during the doctor's measured steps the
tensor methods that wait for the device are wrapped, and each call made by code of the script's own
folder is counted at its line. Lines that never ran (a branch for another setting, a validation loop
the measured steps did not reach) are never named; nor are the reads libraries make (a GradScaler's
inf check, a Trainer's NaN filter), which no line of the user's can change; on a GPU only reads of a
GPU tensor count: a CPU tensor's .item() (nanoGPT's batch indices) waits for nothing. Not installed
where the script compiles (torch.compile): dynamo would trace the wrappers and change its graphs."""
import sys
from pathlib import Path

import torch

from common import env

READS = ("item", "tolist", "cpu", "__int__", "__float__", "__bool__", "__index__")
EXPLICIT = ("item", "tolist")  # on a CPU run only these: int(t) of an index is ordinary there
LIBRARIES = ("site-packages", "dist-packages")


class SyncLines:
    """install() before the measured steps, uninstall() after them; `counts`: "file:line" -> calls."""

    def __init__(self, script: Path, cuda: bool):
        self.folder, self.cuda = Path(script).resolve().parent, cuda
        self.counts: dict[str, int] = {}
        self.steps = 0  # the steps it was installed for (the observer sets it)
        self._real = {}  # name -> (the attribute torch.Tensor had in its own __dict__, or None: inherited)
        self._theirs = {}  # co_filename -> whether it is the script's code (cached: a read is a hot path)
        self.installed = False

    def _script_code(self, filename: str) -> bool:
        found = self._theirs.get(filename)
        if found is None:
            path = Path(filename)
            found = (path.is_absolute() and path.is_relative_to(self.folder)
                     and not path.is_relative_to(env.REPO_ROOT / "common")
                     and not any(part in LIBRARIES for part in path.parts))
            self._theirs[filename] = found
        return found

    def install(self) -> None:
        if "torch._dynamo" in sys.modules:  # a script that compiles: leave its graphs as they are
            from torch._dynamo.utils import counters

            if counters["stats"].get("unique_graphs"):
                return
        for name in READS if self.cuda else EXPLICIT:  # only what counts: each wrapper costs its calls a frame
            self._real[name] = torch.Tensor.__dict__.get(name)
            setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        self.installed = True

    def _wrap(self, name, real):
        counted = READS if self.cuda else EXPLICIT

        def read(tensor, *args, **kwargs):
            if name in counted and (tensor.is_cuda or not self.cuda):
                frame = sys._getframe(1)  # the code that made the read: the script's own, or a library's
                if self._script_code(frame.f_code.co_filename):
                    where = f"{Path(frame.f_code.co_filename).relative_to(self.folder)}:{frame.f_lineno}"
                    self.counts[where] = self.counts.get(where, 0) + 1
            return real(tensor, *args, **kwargs)

        return read

    def uninstall(self) -> None:
        for name, own in self._real.items():
            if own is None:
                delattr(torch.Tensor, name)  # it was inherited: torch.Tensor is left as it was
            else:
                setattr(torch.Tensor, name, own)
        self._real, self.installed = {}, False
