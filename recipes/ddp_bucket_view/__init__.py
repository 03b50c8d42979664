"""DDP's gradients as views into its buckets: one copy of every gradient fewer (torchrun)."""

TITLE = "DistributedDataParallel: gradients as bucket views"
DISTRIBUTED = True
PARITY = {"what": "training loss (rank 0's share of the global batch)", "early_steps": 5, "early_rtol": 1e-5,
          "window": 10, "rtol": 0.01}
EVIDENCE = ("peak_mb", "allreduce_per_step", "distinct_digests")
# smoke: no learning probe, as the ddp recipe's
DEFAULTS = {"resnet18": {"cuda": {"batch_size": 64}, "cpu": {"batch_size": 16},
                         "smoke": {"batch_size": 8, "probe_steps": 0}}}
