"""Folded ops: constant elementwise work done once to the data, not to every batch in the forward."""

from common.spec import LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="Needless ops folded away",
    # The folded data are bit-identical to what the needless ops computed, and the model has the same
    # layers and parameters: the losses agree to rounding.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("forward_kernels", "forward_ops", "kernels_per_step", "cpu_ms_per_step"),
    host_fix=4,  # it cuts a host-bound step's host work: its place among the fixes the report names
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
