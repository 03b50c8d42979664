"""FlexAttention: a sliding-window mask as FlexAttention's block mask, compiled into one fused kernel that
skips the tiles the mask empties, against the same mask as a dense boolean tensor given to
scaled_dot_product_attention, whose kernel reads every entry and scores every pair."""

from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="FlexAttention with a block mask against a dense mask given to scaled_dot_product_attention",
    needs=("flex_attention",),  # torch trains FlexAttention on a GPU only: its CPU backward does not exist
    # the same sums in another order (FlexAttention's online softmax, SDPA's memory-efficient kernel), both
    # in bf16: the losses agree to bf16's rounding. A twin whose mask lets a position see the future, or
    # masks another window, trains alike for many steps: the workload asks each model how far a token's
    # change reaches, and whether it reaches back (common.workloads.gpt.causal and .reach)
    parity=LossParity(what="training loss", early_steps=3, early_rtol=0.02, window=5, rtol=0.03,
                      same=("causal", "reach"), expect={"causal": True}),
    evidence=("peak_mb", "kernels_per_step", "forward_ops", "backward_ops"),
    # a window of 256 in a context of 4,096 tokens: FlexAttention's 128 x 128 tiles hold an allowed pair in
    # about 3 tiles of each row's 32, so it scores about a tenth of what the dense mask's kernel scores
    defaults={"gpt": {"cuda": {"batch_size": 2, "context": 4096, "window": 256},
                      "cpu": {"context": 128, "window": 32}, "smoke": {"window": 8}}},
    # the window from a few tiles to the whole context: where it spans the context, the block mask skips
    # only the causal half, and the dense kernel's reading of the mask is all that is left to save
    sweep=Sweep(
        pair="gpt",
        flag="--window",
        knob="attention window, tokens",
        values={"cuda": [128, 256, 512, 1024, 2048, 4096], "cpu": [16, 32, 64, 128], "smoke": [8, 32]},
    ),
    frozen=("gpt",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
