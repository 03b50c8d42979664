"""CPU seconds used by this process's child processes (DataLoader workers) while they run.

os.times() counts children only once they have exited and been waited for; persistent workers are
alive during the timed steps, so their counters are read from /proc (Linux). None elsewhere.
"""
import os
import time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        return []
    return kids


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def children_s() -> float | None:
    """User + system seconds of the live descendants of this process; None without /proc."""
    me = os.getpid()
    if not os.path.exists(f"/proc/{me}/task/{me}/children"):  # needs CONFIG_PROC_CHILDREN
        return None
    total, todo = 0.0, _children(me)
    while todo:
        pid = todo.pop()
        try:
            total += _cpu_s(pid)
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
        todo += _children(pid)
    return total


class Clock:
    """CPU time from now on, of this process and of its live children (time.process_time counts
    only this process)."""

    def __init__(self):
        self.own, self.children = time.process_time(), children_s()

    def ms_per_step(self, steps: int) -> tuple[float, float | None]:
        """(this process, its children) CPU ms per step since the clock started; children None without /proc."""
        own, children = time.process_time() - self.own, children_s()
        both = self.children is not None and children is not None
        return own * 1000 / steps, (children - self.children) * 1000 / steps if both else None
