"""Default sizes per workload and mode: full size on CUDA, small on CPU, tiny with --smoke; each
workload's own are its spec's (common.workloads), a recipe's overrides its spec's defaults.

min_time: a run times at least this many seconds of steps (more steps than `steps` when the steps
are short), so that a 0.3 ms step is not judged from 0.1 s of data."""
from common.workload_specs import workload_spec

# the learning probe's steps on one batch after the run, for parity (measure.stages.probed): enough for
# each workload's model to cut its loss by a fifth (an MLP at batch 4096 needs 12)
PROBE_STEPS = 12


def defaults(workload: str, mode: str, recipe_overrides: dict | None = None, pair: str | None = None) -> dict:
    """The workload's sizes, with a recipe's own overrides for that workload (or pair, e.g. a served
    pair of it) and mode; smoke stays tiny unless an override names "smoke" itself."""
    values = {"probe_steps": PROBE_STEPS, **workload_spec(workload).sizes[mode]}
    overrides = recipe_overrides or {}
    for key in dict.fromkeys((workload, pair or workload)):
        if mode != "smoke" or "smoke" in overrides.get(key, {}):
            values.update(overrides.get(key, {}).get(mode, {}))
    return values
