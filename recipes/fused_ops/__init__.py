"""Fused ops: the optimizer's update in one fused kernel per group of tensors, against PyTorch's
default (foreach's chain of multi-tensor ops on CUDA; the for-loop on a CPU)."""

from common.spec import DoctorFix, LossParity, RecipeSpec

RECIPE = RecipeSpec(
    title="Fused optimizer: Adam(fused=True) against PyTorch's default",
    main="resnet18",  # the headline pair (make tour): 62 parameter tensors: the foreach chain against one fused kernel
    # A fused Adam does the default's arithmetic in another order: the losses agree to rounding.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.001, window=10, rtol=0.02),
    evidence=("optimizer_kernels", "optimizer_ops", "optimizer_gpu_ms", "optimizer_host_ms", "kernels_per_step"),
    # no goal: the 1.5x once set was against the for-loop, which is not PyTorch's default on CUDA
    # ResNet-18's 62 parameter tensors at the seed's batch 32: the optimizer's launches are a large part
    # of a short step there
    defaults={"resnet18": {"cuda": {"batch_size": 32}}},
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"launch overhead": 3, "CPU compute": 2},
    host_fix=3,  # it cuts a host-bound step's host work: its place among the fixes the report names
    doctor_fixes=(
        DoctorFix(
            "fused", "churn", place=6,
            how="each optimizer built with fused=True (CUDA) or foreach=True (CPU)",
            lines=("optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # your own optimizer and "
                   "settings, with fused=True added: one kernel for every parameter's update",),
        ),
    ),
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
