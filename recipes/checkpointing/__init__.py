"""Activation (gradient) checkpointing: keep fewer activations, recompute them in the backward pass."""

from common.spec import Budget, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Activation checkpointing",
    # the headline pair (make tour): memory for compute on the convolutional activations: its goal's pair
    main="resnet18",
    # The twins do the same arithmetic (recomputed activations equal the stored ones; the RNG state is
    # replayed so dropout masks match), so they agree closely; GPU kernels that are not deterministic
    # let them drift slowly, hence a small window tolerance rather than zero.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("peak_mb", "gflop_per_step"),  # activations dropped, then recomputed
    memory_snapshot=True,  # each twin's allocator history over its profiled steps (CUDA): where the activations went
    # Checkpointing trades compute for activation memory, so the pairs run where activations dominate:
    # the churn MLP at batch 4096 (about 120 MB of activations against 19 MB of weights, gradients and
    # Adam state); ResNet-18 at batch 128 on CUDA.
    defaults={
        "churn": {"cuda": {"batch_size": 4096}, "cpu": {"batch_size": 4096, "steps": 40}},
        "resnet18": {"cuda": {"batch_size": 128}},
    },
    # what checkpointing is for: under a fixed memory budget (a 16 GB T4 by default, --memory-budget-gb),
    # the largest batch each twin trains
    budget=Budget(pair="resnet18", start=64),
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [32, 64, 128, 256, 512], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    # H100: this version's goal against the first H100 run's reference points; T4: the ResNet-18 lab's
    # "30-50% memory reduction, 10-20% slower training", each its range's floor
    goals={
        "H100": {"resnet18": {"max_slowdown": 1.35, "max_memory_share": 0.60}},
        "T4": {"resnet18": {"max_slowdown": 1.2, "max_memory_share": 0.70}},
    },
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
