"""DDP searching its graph for unused parameters when the model has none (torchrun)."""

TITLE = "DistributedDataParallel: find_unused_parameters left off, where every parameter is used"
DISTRIBUTED = True
PARITY = {"what": "training loss (rank 0's share of the global batch)", "early_steps": 5, "early_rtol": 1e-5,
          "window": 10, "rtol": 0.01}
EVIDENCE = ("forward_host_ms", "cpu_ms_per_step", "allreduce_per_step", "distinct_digests")
# smoke: no learning probe, as the ddp recipe's
DEFAULTS = {"resnet18": {"cuda": {"batch_size": 64}, "cpu": {"batch_size": 16},
                         "smoke": {"batch_size": 8, "probe_steps": 0}}}
