"""Gradient accumulation: the same effective batch from k micro-batches, a fraction of the activations."""

from common.spec import LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="Gradient accumulation",
    main="resnet18",  # the headline pair (make tour): the memory of a micro-batch where activations are large
    # The same data and the same mean loss, but dropout draws its masks per micro-batch and BatchNorm
    # normalizes each micro-batch with its own statistics, so single steps differ a little and the
    # trajectories stay close: compared by windows against the full batch. The learning probe is compared
    # too, loosely: at batch 4 (smoke) ResNet-18's micro-batches of one sample put its probe losses up to
    # 77% of the first apart, while both twins cut their loss by 99%; a twin that updates nothing cuts
    # none of its own, which the probe's learning check fails whatever the tolerance.
    parity=LossParity(
        what="training loss (mean over the full batch)",
        early_steps=0,
        early_rtol=0.0,
        window=10,
        rtol=0.05,
        probe_rtol=1.0,
    ),
    evidence=("peak_mb", "kernels_per_step", "gpu_idle_share"),
    # where activations dominate memory: the churn MLP at batch 4096, ResNet-18 at 256 (micro-batches
    # of 1024 and 64)
    defaults={
        "churn": {"cuda": {"batch_size": 4096}, "cpu": {"batch_size": 4096, "steps": 40}},
        "resnet18": {"cuda": {"batch_size": 256}, "smoke": {"batch_size": 8}},
    },
    frozen=("churn", "resnet18"),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
ACCUMULATE = 4  # micro-batches per optimizer step in the fast twin


def micro_batches(tensor):
    """The batch as ACCUMULATE equal micro-batches: each one's loss is divided by ACCUMULATE, which
    weighs them right only when they are the same size."""
    if tensor.shape[0] % ACCUMULATE:
        from common.errors import CookbookError

        raise CookbookError(
            f"--batch-size {tensor.shape[0]}: gradient accumulation here splits a batch into "
            f"{ACCUMULATE} equal micro-batches; give a multiple of {ACCUMULATE}"
        )
    return tensor.chunk(ACCUMULATE)
