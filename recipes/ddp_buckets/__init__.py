"""DDP's gradient buckets: 1 MB buckets against DDP's default (bucket_cap_mb unset: a 1 MB first bucket,
then 25 MB ones; torchrun, the ddp recipe's machinery)."""

TITLE = "DistributedDataParallel: its default gradient buckets (1 MB first, then 25 MB), not 1 MB"
DISTRIBUTED = True
# the same average per element, whatever bucket carries it: the twins agree bit for bit
PARITY = {"what": "training loss (rank 0's share of the global batch)", "early_steps": 5, "early_rtol": 1e-5,
          "window": 10, "rtol": 0.01}
EVIDENCE = ("allreduce_per_step", "allreduce_mb_per_step", "distinct_digests", "peak_mb", "comm_overlap")
# smoke: no learning probe, as the ddp recipe's
DEFAULTS = {"resnet18": {"cuda": {"batch_size": 64}, "cpu": {"batch_size": 16},
                         "smoke": {"batch_size": 8, "probe_steps": 0}}}
