"""DDP searching its graph for unused parameters when the model has none (torchrun)."""
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

TITLE = "DistributedDataParallel: find_unused_parameters left off, where every parameter is used"
DISTRIBUTED = True
PARITY = ONE_OPTION_PARITY
EVIDENCE = ("forward_host_ms", "cpu_ms_per_step", "allreduce_per_step", "distinct_digests")
DEFAULTS = ONE_OPTION_DEFAULTS
