"""zero_grad(set_to_none=True): no fill kernel per gradient; the backward writes fresh gradients."""

from common.spec import DoctorFix, LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="Gradients set to None",
    main="resnet18",  # the headline pair (make tour): 62 gradients filled with zeros or not
    # Zeroed gradients plus the backward's sum equal the backward's fresh gradients: the same numbers.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("kernels_per_step", "backward_ops", "peak_mb"),
    defaults={"resnet18": {"cuda": {"batch_size": 32}}},
    host_fix=5,  # it cuts a host-bound step's host work: its place among the fixes the report names
    doctor_fixes=(
        DoctorFix(
            "set_to_none", "churn", place=8,
            how="zero_grad(set_to_none=True) wherever the script passes False",
            lines=("optimizer.zero_grad(set_to_none=True)  # no fill kernels: backward writes fresh gradients",),
        ),
    ),
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
