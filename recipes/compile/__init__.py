"""torch.compile: the graph captured once, ops fused into generated kernels, launches cut."""

TITLE = "torch.compile"
# Training: inductor fuses and reorders reductions, so the twins round differently and drift slowly
# (ResNet-18's BatchNorm amplifies it); a broken graph shows in the first steps at once.
# Serving: no training, the same weights: each batch's mean probability agrees to float rounding.
PARITY = {"what": "training loss", "early_steps": 5, "early_rtol": 0.01, "window": 10, "rtol": 0.03,
          "workloads": {"churn": {"what": "mean churn probability per served batch",
                                  "early_rtol": 1e-4, "rtol": 1e-4}}}
EVIDENCE = ("kernels_per_step", "ops_per_step", "first_step_s")
# Churn is the served model: batches of 512 requests (the seed's largest sweep sizes), results
# copied back to the host as a caller would need them.
DEFAULTS = {"churn": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}}}
