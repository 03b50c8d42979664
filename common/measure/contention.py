"""How busy the machine was around a measurement: other processes' CPU time on the cores this process
may use, from the kernel's per-core counters (/proc/stat, Linux; None elsewhere), less this process's
own and its live children's (DataLoader workers). A 4 ms step that read 160 ms because another job
spun on its cores is the machine's figure, not the script's: this says so.

    with contention.Window() as w: ...    # w.load: Load(others_cores=0.93, cores=2, wall_s=3.1)
"""
import os
import resource
import time

import torch

from common.analysis.results_run import Load
from common.measure import cpu_time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait; guest is in user)


def _busy_s(cores: set[int]) -> float | None:
    """Seconds the kernel counted busy on these cores since boot."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            fields = rest.split()
            total += sum(int(fields[i]) for i in BUSY_FIELDS if i < len(fields))
    return total / _TICK


def _own_s() -> float | None:
    """This process's CPU, its live children's, and its children's that ended and were reaped meanwhile
    (a DataLoader's workers at an epoch's end): all of it the run's own."""
    children = cpu_time.children_s()
    if children is None:
        return None
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children + reaped.ru_utime + reaped.ru_stime


class Window:
    """Other processes' CPU use on this process's cores between enter and exit (`load`, or None)."""

    def __init__(self):
        self.cores = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.load: Load | None = None

    def __enter__(self):
        self._t, self._busy, self._own = time.perf_counter(), _busy_s(self.cores), _own_s()
        return self

    def __exit__(self, *exc):
        wall, busy, own = time.perf_counter() - self._t, _busy_s(self.cores), _own_s()
        if None not in (busy, own, self._busy, self._own) and wall > 0:
            others = max(0.0, (busy - self._busy) - (own - self._own)) / wall
            self.load = Load(others_cores=round(others, 3), cores=len(self.cores), wall_s=round(wall, 3),
                             threads=torch.get_num_threads(), own_cores=round((own - self._own) / wall, 3))
        return False
