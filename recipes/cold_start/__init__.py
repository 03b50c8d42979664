"""Compile's cold start: the time from a process's start to its first finished step, shortened by
compiling the repeated block once (regional compilation) or by loading what an earlier process
compiled (the mega-cache)."""

from common.spec import LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="Compile's cold start: regional compilation and compile caches",
    main="resnet18_cache",  # the headline pair (make tour): every restart pays compilation again, unless cached
    measure="first step",  # the headline is the time to first step; the steady steps' speedup stands beside it
    fresh=True,  # every process a fresh interpreter: a user's restart imports torch too
    prime=("resnet18_cache",),  # its fast twin runs once first: the process that saves the artefacts
    # Both twins of both pairs compile ResNet-18's training step (default mode); Inductor fuses and orders
    # reductions differently at other graph boundaries (regional compilation cuts the graph at every block),
    # so the twins round differently and drift slowly, as the compile recipe's do: its rule.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.02, at_batch=16, window=10, rtol=0.05),
    evidence=("first_step_s", "warmup_s"),
    # batch 32 as the compile recipe's training pair; five warm-up steps on a GPU (the first compiles, the
    # next may recompile for the autocast cache and settle the allocator) before the steady steps
    defaults={
        "resnet18_regional": {"cuda": {"batch_size": 32, "warmup": 5}},
        "resnet18_cache": {"cuda": {"batch_size": 32, "warmup": 5}},
    },
)
