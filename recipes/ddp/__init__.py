"""Data-parallel training (DDP under torchrun): the gradient all-reduce once per optimizer step, not once
per micro-batch."""

from common.spec import LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="DistributedDataParallel: all-reduce once per step (no_sync)",
    main="resnet18",  # the headline pair (make tour): the pair with enough gradient to all-reduce
    distributed=True,  # the runner launches each run as `torchrun --standalone --nproc-per-node N`
    # the same arithmetic in both twins, summed in another order: the gradients agree to rounding
    parity=LossParity(
        what="training loss (rank 0's share of the global batch)",
        early_steps=5,
        early_rtol=0.0001,
        window=10,
        rtol=0.01,
    ),
    evidence=("allreduce_per_step", "allreduce_mb_per_step", "distinct_digests", "peak_mb", "comm_overlap"),
    # a global batch of 2 ranks x 4 micro-batches: churn 256 (32 per micro-batch), ResNet-18 64 on a GPU.
    # Smoke: no learning probe (the twins' arithmetic is the same, which the first steps check to 0.01%):
    # at smoke sizes it was the largest part of a rank's work, after its start.
    defaults={
        "churn": {"cuda": {"batch_size": 256}, "cpu": {"batch_size": 256, "steps": 60}, "smoke": {"probe_steps": 0}},
        "resnet18": {
            "cuda": {"batch_size": 64},
            "cpu": {"batch_size": 16},
            "smoke": {"batch_size": 16, "probe_steps": 0},
        },
    },
)
MICRO_BATCHES = 4  # micro-batches per rank and optimizer step: the global batch is ranks x 4 micro-batches

# the one-option DDP pairs (ddp_buckets, ddp_bucket_view, ddp_unused, ddp_static_graph): ResNet-18 only,
# one optimizer step per batch, the same average per element whatever the option, no probe in smoke
ONE_OPTION_PARITY = LossParity(
    what="training loss (rank 0's share of the global batch)", early_steps=5, early_rtol=1e-5, window=10, rtol=0.01
)
ONE_OPTION_DEFAULTS = {
    "resnet18": {"cuda": {"batch_size": 64}, "cpu": {"batch_size": 16}, "smoke": {"batch_size": 8, "probe_steps": 0}}
}


def rank_micro_batches(tensors):
    """This rank's share of the global batch, as MICRO_BATCHES equal micro-batches (each tensor alike)."""
    from common.distributed import rank_share, world  # torch: the scripts' import, not the runner's

    _, size = world()
    parts = size * MICRO_BATCHES
    if tensors[0].shape[0] % parts:
        from common.errors import CookbookError

        raise CookbookError(
            f"--batch-size {tensors[0].shape[0]}: the ddp pairs split the global batch into "
            f"{size} ranks x {MICRO_BATCHES} micro-batches; give a multiple of {parts}"
        )
    return list(zip(*(t.chunk(MICRO_BATCHES) for t in rank_share(*tensors))))
