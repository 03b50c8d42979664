"""Input pipelines: stop the GPU waiting for data (device batching; DataLoader workers and pinning)."""

import os

from common.spec import DoctorFix, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Input pipeline (DataLoader)",
    # the headline pair (make tour): the host pipeline against the device one, where images make it count
    main="resnet18",
    # The same batches in the same order, and the same random crops (seeded per sample and epoch,
    # whichever process augments them): the losses agree to rounding.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("data_wait_share", "data_wait_ms", "cpu_ms_per_step", "worker_cpu_ms_per_step", "gpu_idle_share"),
    # `make sweep-dataloader` (the lab's Exercise 2.1): the fast twin's worker count
    sweep=Sweep(
        pair="resnet18",
        flag="--workers",
        knob="DataLoader workers",
        values={"cuda": [0, 1, 2, 4, 8, 15], "cpu": [0, 1, 2], "smoke": [0, 1]},
    ),
    # H100: this version's goal against the first H100 run's reference points; T4: the ResNet-18 lab's
    # "1.3-1.8x speedup from optimized data loading", its floor
    goals={"H100": {"resnet18": {"min_speedup": 4.0}}, "T4": {"resnet18": {"min_speedup": 1.3}}},
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"data loading": 1},
    doctor_fixes=(
        DoctorFix(
            "workers", "resnet18", place=1,
            how="DataLoader(num_workers=N, pin_memory on CUDA, persistent_workers=True, prefetch_factor=4) wherever "
                "the script builds one without workers",
            lines=("loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,",
                   "                    num_workers=workers,  # your cores but one: batches made in parallel",
                   "                    pin_memory=True, persistent_workers=True, prefetch_factor=4)  # pinned on a "
                   "GPU",
                   "x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # copies overlap the "
                   "step"),
        ),
    ),
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)


def workers(run=None) -> int:
    """`--workers N` when given (make sweep-dataloader turns it); else all usable cores but one,
    which the training process keeps (at most 16: beyond that the workers mostly contend for
    memory bandwidth)."""
    if run is not None and getattr(run.args, "workers", None) is not None:
        return run.args.workers  # 0: no worker processes (the sweep's reference point)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(16, cores - 1))
