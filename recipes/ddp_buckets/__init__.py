"""DDP's gradient buckets: 1 MB buckets against DDP's default (bucket_cap_mb unset: a 1 MB first bucket,
then 25 MB ones; torchrun, the ddp recipe's machinery)."""

from common.spec import RecipeSpec
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

RECIPE = RecipeSpec(
    title="DistributedDataParallel: its default gradient buckets (1 MB first, then 25 MB), not 1 MB",
    distributed=True,
    # the same average per element, whatever bucket carries it: the twins agree bit for bit
    parity=ONE_OPTION_PARITY,
    evidence=("allreduce_per_step", "allreduce_mb_per_step", "distinct_digests", "peak_mb", "comm_overlap"),
    defaults=ONE_OPTION_DEFAULTS,
    frozen=("resnet18",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
