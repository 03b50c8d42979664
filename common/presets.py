"""Default sizes per workload and mode: full size on CUDA, small on CPU, tiny with --smoke.

min_time: a run times at least this many seconds of steps (more steps than `steps` when the steps
are short), so that a 0.3 ms step is not judged from 0.1 s of data."""

PRESETS = {
    "churn": {
        "cuda": {"batch_size": 64, "steps": 300, "warmup": 30, "profile_steps": 5, "min_time": 2.0},
        "cpu": {"batch_size": 64, "steps": 300, "warmup": 20, "profile_steps": 3, "min_time": 2.0},
        "smoke": {"batch_size": 32, "steps": 6, "warmup": 2, "profile_steps": 2, "min_time": 0.0},
    },
    "resnet18": {
        "cuda": {"batch_size": 32, "steps": 100, "warmup": 15, "profile_steps": 5, "image_size": 224,
                 "min_time": 2.0},
        "cpu": {"batch_size": 8, "steps": 24, "warmup": 3, "profile_steps": 2, "image_size": 112, "min_time": 2.0},
        "smoke": {"batch_size": 4, "steps": 3, "warmup": 1, "profile_steps": 1, "image_size": 64, "min_time": 0.0},
    },
}
WORKLOADS = tuple(PRESETS)
# the learning probe's steps on one batch after the run, for parity (measure.stages.probed): enough for the
# churn MLP to cut its loss by a fifth at batch 4096, ResNet-18 fits its batch in 4
PROBE_STEPS = 12


def defaults(workload: str, mode: str, recipe_overrides: dict | None = None, pair: str | None = None) -> dict:
    """The preset, with a recipe's own overrides for that workload (or pair, e.g. churn_serving)
    and mode; smoke stays tiny unless an override names "smoke" itself."""
    values = {"probe_steps": PROBE_STEPS, **PRESETS[workload][mode]}
    overrides = recipe_overrides or {}
    for key in dict.fromkeys((workload, pair or workload)):
        if mode != "smoke" or "smoke" in overrides.get(key, {}):
            values.update(overrides.get(key, {}).get(mode, {}))
    return values
