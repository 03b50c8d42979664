"""Selective activation checkpointing: per transformer block, the matmuls' and attention's outputs kept,
the cheap ops (LayerNorm, GELU, the residual adds) recomputed in the backward."""

from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Selective activation checkpointing",
    # the headline pair (make tour): full checkpointing per block against the selective policy
    main="gpt",
    # The twins do the same arithmetic (a recomputed op gives the value the forward gave; dropout is 0),
    # so the losses agree closely; GPU kernels that are not deterministic let them drift slowly.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("peak_mb", "gflop_per_step"),  # the activations kept, and the forward run again
    memory_snapshot=True,  # each twin's allocator history over its profiled steps (CUDA): what each block keeps
    # batch 16 on a GPU: the activations (~430 MB per block in bf16) outweigh the 1.4 GB of weights, gradients
    # and AdamW's state (86 M parameters), where checkpointing has something to save
    defaults={"gpt": {"cuda": {"batch_size": 16}}, "gpt_plain": {"cuda": {"batch_size": 16}}},
    sweep=Sweep(
        pair="gpt",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [4, 8, 16, 32, 64], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    frozen=("gpt",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
