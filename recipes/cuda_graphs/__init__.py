"""CUDA graphs: a whole step recorded once and replayed with one launch: the fix for a host-bound step."""

from common.spec import AnswerParity, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="CUDA graphs",
    main="churn",  # the headline pair (make tour): the host-bound training step that a graph replays in one launch
    # Training: the graphed step draws its dropout masks from the graph's own RNG offsets, so single
    # steps differ a little from the eager twin's: compared by windows, and by the learning probe with
    # a looser tolerance (its masks differ too; a twin that stops learning is far further off). Serving:
    # the same trained weights and requests: each customer's answer, in order, agrees to float rounding.
    parity=LossParity(what="training loss", early_steps=0, early_rtol=0.0, window=10, rtol=0.05, probe_rtol=0.3),
    parity_by_pair={"churn_serving": AnswerParity(what="churn probability per request", atol=0.0001)},
    evidence=("gpu_idle_share", "cpu_ms_per_step", "launch_ms_per_step", "ops_per_step"),
    # churn training at the seed's batch 64: about 2.4 ms of host work for 0.3 ms of GPU work per step;
    # serving at batch 512, answers copied to the host
    defaults={"churn_serving": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}}},
    sweep=Sweep(
        pair="churn",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [64, 256, 1024, 4096], "cpu": [64, 256], "smoke": [16, 32]},
    ),
    goals={"H100": {"churn": {"min_speedup": 3.0}}},  # against the first H100 run's reference points
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"launch overhead": 1},
    host_fix=1,  # it cuts a host-bound step's host work: its place among the fixes the report names
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
