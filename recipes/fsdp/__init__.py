"""Sharded data parallelism (FSDP2 under torchrun): parameters, gradients and optimizer state split
across the ranks instead of copied on every one."""

from common.spec import LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="FSDP2 (fully_shard) against DDP: the training state split across ranks, not copied",
    distributed=True,  # the runner launches each run with torchrun (--standalone, or across nodes)
    # the same global batch and the same averaged gradients: DDP all-reduces them, FSDP reduce-scatters
    # them, each summing in its own order; single steps agree to rounding (BatchNorm is per rank in both)
    parity=LossParity(
        what="training loss (rank 0's share of the global batch)", early_steps=5, early_rtol=0.001, window=10, rtol=0.01
    ),
    evidence=(
        "held_mb",
        "peak_mb",
        "allgather_per_step",
        "reducescatter_per_step",
        "allreduce_per_step",
        "distinct_digests",
    ),
    # the global batch, split over the ranks: 64 on a GPU (as the ddp pairs), 16 on a CPU
    defaults={
        "resnet18": {
            "cuda": {"batch_size": 64},
            "cpu": {"batch_size": 16},
            "smoke": {"batch_size": 8, "probe_steps": 0},
        }
    },
    frozen=("resnet18",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
