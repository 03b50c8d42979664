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


def prepare(device) -> None:
    """What costs seconds and needs no device work: the CUDA context (a synchronize on an idle device
    creates it and runs nothing)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def from_env() -> Gate | None:
    """This process's gate, or None where it was started without one (a process on its own)."""
    return env.gate()


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


def release(gate: Gate | None) -> None:
    """This process's device work is done: the next one may start its own."""
    if gate is not None:
        try:
            Path(gate.release).touch()
        except OSError:
            pass  # its runner opens the gate when this process ends


def pin(cpus: list[int]) -> None:
    """Every thread of this process (torch's pools, the CUDA driver's) onto `cpus`; children started
    from here on inherit them (a DataLoader's workers)."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that ended meanwhile


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
