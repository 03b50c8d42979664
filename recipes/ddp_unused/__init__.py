"""DDP searching its graph for unused parameters when the model has none (torchrun)."""

from common.spec import RecipeSpec
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

RECIPE = RecipeSpec(
    title="DistributedDataParallel: find_unused_parameters left off, where every parameter is used",
    distributed=True,
    parity=ONE_OPTION_PARITY,
    evidence=("forward_host_ms", "cpu_ms_per_step", "allreduce_per_step", "distinct_digests"),
    defaults=ONE_OPTION_DEFAULTS,
)
