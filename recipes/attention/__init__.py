"""Fused attention: F.scaled_dot_product_attention (flash, memory-efficient, cuDNN or CPU kernels)
against attention written by hand, which keeps a T x T score matrix per head for the backward."""

from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Fused attention: scaled_dot_product_attention against attention by hand",
    # The same arithmetic in another order (a fused kernel's online softmax in 16-bit, the hand-written
    # one's full softmax): the losses agree to bf16's rounding, not to fp32's.
    # A twin whose attention sees the future trains alike for hundreds of steps, until it has learnt to
    # read the next token: the workload asks each model directly (common.workloads.gpt.causal).
    parity=LossParity(what="training loss", early_steps=3, early_rtol=0.02, window=5, rtol=0.03, same=("causal",),
                      expect={"causal": True}),
    evidence=("peak_mb", "kernels_per_step", "forward_ops", "backward_ops"),
    # the hand-written twin keeps B x heads x T x T scores per layer for the backward, so its memory grows
    # as T^2 where the fused one's grows as T: the sweep finds where the time crosses and where it runs out
    sweep=Sweep(
        pair="gpt",
        flag="--context",
        knob="context length, tokens",
        values={"cuda": [256, 512, 1024, 2048, 4096, 8192], "cpu": [32, 64, 128, 256], "smoke": [16, 32]},
    ),
    frozen=("gpt",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
