"""Host-sync removal: keep per-step statistics on the device and read them once."""

from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Host-sync removal",
    main="resnet18",  # the headline pair (make tour): its goal's
    # The twins do the same arithmetic; only when the host reads the numbers changes, so the losses
    # agree to rounding (GPU kernels that are not deterministic may drift them slowly apart).
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("syncs_per_step", "gpu_idle_share"),
    # The seed's serving-size batch for churn. Its step stays host-bound even there (the README: the GPU
    # idle 89% of the first H100 run's profiled steps), so the pair shows where removing a sync cannot pay.
    defaults={"churn": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}}},
    # `make sweep-sync_removal`: a sync costs the GPU's idle time while the host waits and relaunches,
    # which matters less as each step's GPU work grows with the batch
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [8, 32, 128, 256], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    goals={"H100": {"resnet18": {"min_speedup": 1.2}}},  # against the first H100 run's reference points
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"host syncs": 1},
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
