"""DDP told its graph is static, against DDP's defaults (torchrun)."""
from recipes.ddp import ONE_OPTION_DEFAULTS, ONE_OPTION_PARITY

TITLE = "DistributedDataParallel: static_graph=True, against DDP's defaults"
DISTRIBUTED = True
PARITY = ONE_OPTION_PARITY
EVIDENCE = ("forward_host_ms", "cpu_ms_per_step", "allreduce_per_step", "distinct_digests")
DEFAULTS = ONE_OPTION_DEFAULTS
