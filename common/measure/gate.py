"""A pipelined measured process: it prepares while the process before it runs, and starts its device
work only once that one has finished its own, so that the GPU never idles between two processes and
no timed stretch ever shares the device (the runners' side: common.runners.launch.Pipeline).

Preparing is what needs no device work: the fork, the CUDA context, the data's host arrays. It runs
on cores the measured processes do not use; at the gate the process moves, every thread of it, onto
the measured cores. The gate is a file the process before creates once its device work is done (its
runner creates it too when that process ends, however it ended).

    COOKBOOK_GATE={"wait": "<file>" | null, "release": "<file>", "runner": <pid>, "cpus": [1, 2, 3]}
"""
import os
import time
from pathlib import Path

from common import env
from common.env import Gate

POLL_S = 0.005  # how often a waiting process looks at its gate: well under the 1 s a handoff may cost
RUNNER_POLL_S = 1.0  # how often it checks that its runner still lives (a killed runner opens no gate)


def prepare(gate: Gate, device) -> None:
    """What costs seconds and needs no device work: the CUDA context (a synchronize on an idle device
    creates it and runs nothing). Its pid is written first, for the others' GPU monitors (siblings)."""
    try:
        Path(gate.release).with_suffix(".pid").write_text(str(os.getpid()))
    except OSError:
        pass
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def from_env() -> Gate | None:
    """This process's gate, or None where it was started without one (a process on its own); taken out
    of the environment, so that what the process starts is not gated too."""
    found = env.gate()
    os.environ.pop(env.GATE_ENV, None)
    return found


def siblings(gate: Gate | None) -> set[int]:
    """The pids of the pipeline's processes (each writes its own beside its gate): the one before it, still
    exiting, and the next, preparing, hold a CUDA context of their own during this one's steps, idle."""
    if gate is None:
        return set()
    found = set()
    for path in Path(gate.release).parent.glob("*.pid"):
        try:
            found.add(int(path.read_text()))
        except (OSError, ValueError):
            pass
    return found - {os.getpid()}


def wait(gate: Gate, clock=time.monotonic, sleep=time.sleep) -> float:
    """Until the process before has finished its device work; then onto the measured cores. Seconds waited."""
    t0 = last_check = clock()
    while gate.wait is not None and not os.path.exists(gate.wait):
        if clock() - last_check >= RUNNER_POLL_S:
            last_check = clock()
            if not _alive(gate.runner):
                raise SystemExit(f"the runner (pid {gate.runner}) ended before this process's turn: nothing run")
        sleep(POLL_S)
    pin(gate.cpus)
    return clock() - t0


def release(gate: Gate | None, device=None) -> None:
    """This process's device work is done: the next one may start its own, with the memory this one's
    allocator cached given back first (the next one's batch may need it: a T4 holds 16 GB; cuDNN picks
    its algorithms by the memory free)."""
    if gate is not None:
        if device is not None and device.type == "cuda":
            import torch

            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        try:
            Path(gate.release).touch()
        except OSError:
            pass  # its runner opens the gate when this process ends


def pin(cpus: list[int]) -> None:
    """Every thread of this process (torch's pools, the CUDA driver's) onto `cpus`; children started
    from here on inherit them (a DataLoader's workers)."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    done = set()
    while True:  # again until no thread is new: one may start while the others move
        try:
            threads = {int(t) for t in os.listdir("/proc/self/task")} - done
        except OSError:
            threads = {0} - done
        if not threads:
            return
        for tid in threads:
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                pass  # a thread that ended meanwhile
        done |= threads


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
