"""The process around a harness script: its exception and SIGTERM hooks, which error counts as out
of memory, the device it asked for, and folders it must be able to write."""
import contextlib
import os
import signal
import sys
from pathlib import Path

import torch

from common import startup
from common.errors import EXIT_OOM, CookbookError

# the allocator's words, and the CUDA libraries' when they cannot allocate their own workspace:
# CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED, CUFFT_ALLOC_FAILED, CUSOLVER_STATUS_ALLOC_FAILED ...
OOM_WORDS = ("out of memory", "can't allocate memory", "ALLOC_FAILED", "ALLOCATION_FAILED")
# which memory ran out, as the error says: the host's allocator, or the GPU's (the caching allocator's
# own error, the driver's, a CUDA library's failed allocation: cuDNN 9 says DEVICE_ALLOCATION_FAILED)
HOST_OOM = ("DefaultCPUAllocator", "can't allocate memory")
DEVICE_OOM = ("CUDA out of memory", "CUDA error: out of memory", "CUDA driver error: out of memory",
              "Triton Error [CUDA]: out of memory", "DEVICE_ALLOCATION_FAILED", "CUBLAS_STATUS_ALLOC",
              "CUFFT_ALLOC_FAILED", "CUSOLVER_STATUS_ALLOC", "CUDNN_STATUS_ALLOC", "NCCL")
# what cuDNN and cuBLAS say near a memory cap, in other words: no engine whose workspace fits, a
# handle that could not be created. Without a cap these are genuine errors (an unsupported
# configuration), so they count as out of memory only when the run capped its memory.
CAPPED_OOM_WORDS = ("unable to find an engine", "CUDNN_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_NOT_INITIALIZED")


def is_oom(exc: BaseException, capped: bool = False) -> bool:
    """Did this run out of memory? `capped`: the run's memory is capped (--memory-budget-gb took
    effect), where cuDNN's "no engine" and cuBLAS's failed handle mean the workspace did not fit."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc)
    return any(w in text for w in OOM_WORDS) or (capped and any(w in text for w in CAPPED_OOM_WORDS))


def oom_device(exc: BaseException, message: str) -> str:
    """"cpu" or "cuda" as the out-of-memory error says; "other" for another accelerator's
    (torch.OutOfMemoryError is every backend's: MPS, XPU)."""
    if any(w in message for w in HOST_OOM):
        return "cpu"
    if any(w in message for w in DEVICE_OOM):
        return "cuda"
    return "other" if isinstance(exc, torch.OutOfMemoryError) else "cpu"


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill ends like Ctrl-C: nothing half-written


def interrupt_on_sigterm() -> None:
    """A kill (SIGTERM) ends the process like Ctrl-C."""
    signal.signal(signal.SIGTERM, _terminate)


class Hooks:
    """The process-wide handlers of a harness script: input problems are one line, not a stack
    trace; running out of memory is a result (run.write_oom); anything else keeps its trace."""

    def __init__(self, prog: str):
        self.prog, self.run = prog, None

    def uncaught(self, exc_type, exc, tb):
        if issubclass(exc_type, CookbookError):
            print(f"{self.prog}: error: {exc}", file=sys.stderr)
            sys.exit(2)
        if issubclass(exc_type, KeyboardInterrupt):
            print(f"{self.prog}: interrupted: no result written", file=sys.stderr)
            sys.exit(130)
        if self.run is not None and is_oom(exc, capped=self.run.memory_cap_gb is not None):
            self.run.write_oom(exc)
            sys.exit(EXIT_OOM)
        sys.__excepthook__(exc_type, exc, tb)


@contextlib.contextmanager
def process_hooks(prog: str):
    """Install the exception hook and the SIGTERM handler; restore the previous ones on exit."""
    hooks = Hooks(prog)
    saved = sys.excepthook, signal.getsignal(signal.SIGTERM)
    sys.excepthook = hooks.uncaught
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield hooks
    finally:
        sys.excepthook = saved[0]
        signal.signal(signal.SIGTERM, saved[1])


def resolve_device(choice: str) -> tuple[torch.device, list[str]]:
    """The device --device names, and the notices that go with it (auto without CUDA runs on the CPU)."""
    if choice in ("auto", "cuda") and not torch.cuda.is_available():
        unseen = startup.unseen(torch.__version__, torch.version.cuda)  # a GPU is there, and torch cannot use it
        if choice == "cuda":
            raise CookbookError(unseen or f"--device cuda: CUDA is not available here (torch {torch.__version__}); "
                                "use --device cpu or --device auto")
        notices = ["CUDA not available: ran on CPU (numbers are CPU numbers)"]
        return torch.device("cpu"), notices + ([unseen] if unseen else [])
    if choice in ("auto", "cuda"):  # a GPU this torch has no kernels for: one line now, not at the first op
        why = startup.no_kernels(torch.__version__, torch.version.cuda, torch.cuda.get_device_capability(0),
                                 torch.cuda.get_device_name(0), torch.cuda.get_arch_list())
        if why:
            raise CookbookError(why)
    return torch.device("cuda" if choice in ("auto", "cuda") else "cpu"), []


def writable_dir(path: Path, what: str) -> Path:
    """`path`, created; one line naming it when it cannot be written, before any step runs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise CookbookError(f"{what} {path} cannot be written ({e.strerror}); choose another folder") from None
    return path
