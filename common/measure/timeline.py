"""A measured process's life in phases: when each ended, in seconds since the process began, so that
what a process costs beyond its warm-up and timed steps (interpreter, imports, CUDA, data, the probe,
the profiler's export) is read from its result instead of guessed (the phases' order:
common.analysis.timeline). The runner that waited for the process adds "exit" (launch.child)."""
import time

# a child forked from a server that had imported torch (common.measure.zygote sets it): its time from
# the process's start lacks the interpreter's start and the imports a fresh process pays
FORKED = False


def process_start() -> float:
    """When this process began, on time.time()'s clock: a fresh interpreter's exec, a forked child's fork
    (/proc's start time in clock ticks since boot, against the boot clock: to 10 ms, where psutil's
    create_time() rests on a boot time in whole seconds); the caller's now where the system does not say."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        import os

        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc: the timeline then starts at the harness
        return time.time()


class Timeline:
    """Marks by phase name, each the seconds from the process's start to the phase's end."""

    def __init__(self, started: float | None = None):
        self.started = process_start() if started is None else started
        self.marks: dict[str, float] = {}

    def mark(self, name: str, at: float | None = None) -> None:
        """`name` ended now (or at `at`, a time.time()); never before the process began (a module
        imported by a fork server before the fork counts as imported at the start)."""
        self.marks[name] = round(max(0.0, (time.time() if at is None else at) - self.started), 4)
