"""The naive programs the seed documents start from; `make diagnose-<workload>` examines them."""

# churn: the seed trains 5 epochs at batch 64: 88 steps per epoch over the 5,634 training rows, so
# warm-up + timed + profiled + the FLOP-count step = 440 steps.
DEFAULTS = {
    "churn": {"cuda": {"warmup": 34, "steps": 400, "profile_steps": 5},
              "cpu": {"warmup": 34, "steps": 400, "profile_steps": 5}},
    "resnet18": {"cuda": {"warmup": 10, "steps": 200, "profile_steps": 5}},
}
