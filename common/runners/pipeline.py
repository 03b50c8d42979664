"""Rounds of measured processes with no idle device between them: while one process runs, the next
is forked and prepares (its CUDA context, its data's host arrays) on cores the measured processes
leave free, and starts its device work only once the one before has finished its own (the child's
side: common.measure.gate).

Only where that costs the measured process nothing: children forked from a fork server (a fresh
interpreter's start is what a cold-start pair measures), one process per round (no torchrun), and
cores to spare (by default the runners leave core 0 to themselves on a machine of 4 cores or more).
COOKBOOK_PIPELINE=0 turns it off.
"""
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import env
from common.env import Gate


@dataclass
class Slot:
    """A child's place in the pipeline: its gate, and the cores it prepares on."""
    gate: Gate
    cores: list[int]


def siblings(cpu: int, topology: Path = Path("/sys/devices/system/cpu")) -> set[int]:
    """The hardware threads of cpu's physical core, itself included (itself alone where the system does not say)."""
    try:
        said = (topology / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip()
        return {c for part in said.split(",") for c in _span(part)} | {cpu}
    except (OSError, ValueError):
        return {cpu}


def _span(part: str) -> range:
    a, _, b = part.partition("-")
    return range(int(a), int(b or a) + 1)


def spare_cores(cpus, topology: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """The cores this runner may use that the measured children do not, whole physical cores only: a
    preparing process on a measured core's other hardware thread would slow that core's work."""
    measured = set(cpus or env.cpu_set())
    return sorted(c for c in set(env.cpu_set()) - measured if not siblings(c, topology) & measured)


def exclusive_gpu() -> str | None:
    """Why the GPU takes one process at a time (NVML's compute mode other than Default: a cluster's
    EXCLUSIVE_PROCESS), where a preparing process could not create its context; None where it may."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        modes = {nvml.nvmlDeviceGetComputeMode(nvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(nvml.nvmlDeviceGetCount())}
    except Exception:  # no NVML: a CPU run, or a driver that does not say
        return None
    if modes - {nvml.NVML_COMPUTEMODE_DEFAULT}:
        return "the GPU's compute mode takes one process at a time (nvidia-smi -c)"
    return None


def wanted(cpus, cuda: bool = False) -> str | None:
    """Why the children cannot be pipelined here, or None where they can."""
    if os.environ.get(env.PIPELINE_ENV) == "0":
        return f"{env.PIPELINE_ENV}=0"
    if not os.environ.get(env.ZYGOTE_ENV):
        return "each child starts as a fresh interpreter"
    if not spare_cores(cpus):
        return "no core to spare: the children use all of this machine's (or their cores' other threads)"
    return exclusive_gpu() if cuda else None


class Pipeline:
    """Slots in order: each child's gate is the end of the one started before it. start(item,
    round_no, slot) -> launch.Started runs one child; the rounds engine asks for the next one ahead."""

    def __init__(self, start, cpus):
        self.start, self.cpus = start, list(cpus or [])
        self.folder = Path(tempfile.mkdtemp(prefix="cookbook-gates-"))
        self.count = 0
        self.last: str | None = None  # the release file of the child started last
        self.ahead = None  # (item, round_no, Started): the next child, preparing

    def slot(self) -> Slot:
        self.count += 1
        release = str(self.folder / f"{self.count}.done")
        gate = Gate(wait=self.last, release=release, runner=os.getpid(), cpus=self.cpus)
        self.last = release
        return Slot(gate, spare_cores(self.cpus))

    def take(self, item, round_no):
        """The child for (item, round_no): the one prepared ahead when it is that one, else started now
        (a prepared child the rounds did not want is stopped first, its gate opened)."""
        if self.ahead is not None:
            ahead_item, ahead_round, started = self.ahead
            self.ahead = None
            if (ahead_item, ahead_round) == (item, round_no):
                started.t0 = time.perf_counter()  # its seconds from its turn: what it costs the sitting
                return started
            started.cancel()
        return self.start(item, round_no, self.slot())

    def prepare(self, item, round_no) -> None:
        """Start (item, round_no) now: it prepares, and waits at its gate for the child started before."""
        self.ahead = (item, round_no, self.start(item, round_no, self.slot()))

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead[2].cancel()
            self.ahead = None
        shutil.rmtree(self.folder, ignore_errors=True)
