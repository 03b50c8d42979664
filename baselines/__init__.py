"""The naive programs the seed documents start from; `make diagnose-<workload>` examines them."""

# churn: the seed trains 5 epochs at batch 64: 88 steps per epoch over the 5,634 training rows, so
# warm-up (33) + timed (400) + profiled (5, plus the profiler's own warm-up step) + the FLOP-count
# step = 440 steps. min_time 0: the seed's step count, not a minimum duration, decides.
DEFAULTS = {
    "churn": {"cuda": {"warmup": 33, "steps": 400, "profile_steps": 5, "min_time": 0.0},
              "cpu": {"warmup": 33, "steps": 400, "profile_steps": 5, "min_time": 0.0}},
    "resnet18": {"cuda": {"warmup": 10, "steps": 200, "profile_steps": 5}},
}
