"""DDP's gradients as views into its buckets: one copy of every gradient fewer (torchrun)."""

from common.spec import RecipeSpec
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

RECIPE = RecipeSpec(
    title="DistributedDataParallel: gradients as bucket views",
    distributed=True,
    parity=ONE_OPTION_PARITY,
    evidence=("peak_mb", "allreduce_per_step", "distinct_digests"),
    defaults=ONE_OPTION_DEFAULTS,
)
