"""DDP's gradients as views into its buckets: one copy of every gradient fewer (torchrun)."""
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

TITLE = "DistributedDataParallel: gradients as bucket views"
DISTRIBUTED = True
PARITY = ONE_OPTION_PARITY
EVIDENCE = ("peak_mb", "allreduce_per_step", "distinct_digests")
DEFAULTS = ONE_OPTION_DEFAULTS
