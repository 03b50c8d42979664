"""Input pipelines: stop the GPU waiting for data (device batching; DataLoader workers and pinning)."""

import os

TITLE = "Input pipeline (DataLoader)"
# The same batches in the same order, and the same random crops (seeded per sample and epoch,
# whichever process augments them): the losses agree to rounding.
PARITY = {"what": "training loss", "early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02}
EVIDENCE = ("data_wait_share", "data_wait_ms", "cpu_ms_per_step", "worker_cpu_ms_per_step", "gpu_idle_share")


def workers(run=None) -> int:
    """`--workers N` when given (make sweep-dataloader turns it); else all usable cores but one,
    which the training process keeps (at most 16: beyond that the workers mostly contend for
    memory bandwidth)."""
    if run is not None and getattr(run.args, "workers", None) is not None:
        if run.args.workers < 1:
            from common.errors import CookbookError

            raise CookbookError("--workers 0: this script's point is its worker processes; give 1 or more "
                                "(the slow twin is the one without workers)")
        return run.args.workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(16, cores - 1))
# `make sweep-dataloader` (the lab's Exercise 2.1): the fast twin's worker count
SWEEP = {"pair": "resnet18", "flag": "--workers", "knob": "DataLoader workers",
         "values": {"cuda": [1, 2, 4, 8, 15], "cpu": [1, 2], "smoke": [1, 2]}}
