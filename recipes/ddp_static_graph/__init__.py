"""DDP told its graph is static, against DDP's defaults (torchrun)."""

from common.spec import RecipeSpec
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

RECIPE = RecipeSpec(
    title="DistributedDataParallel: static_graph=True, against DDP's defaults",
    distributed=True,
    parity=ONE_OPTION_PARITY,
    evidence=("forward_host_ms", "cpu_ms_per_step", "allreduce_per_step", "distinct_digests"),
    defaults=ONE_OPTION_DEFAULTS,
)
