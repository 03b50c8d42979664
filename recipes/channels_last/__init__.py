"""channels_last (NHWC): the memory layout tensor-core convolutions want, for model and input.

ResNet-18 only: the churn MLP has no convolutions, and a 2-D tensor has no channel dimension to move.
"""

from common.spec import DoctorFix, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="channels_last memory format",
    # The same arithmetic in another layout: cuDNN picks other algorithms, which round differently
    # (TF32 on an H100), so the twins drift slowly; a wrong layout would show at once.
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.01, window=10, rtol=0.05),
    evidence=("kernels_per_step", "gpu_busy_ms_per_step", "peak_mb"),
    # in fp32 the pair needs tensor-core convolutions, TF32's (sm_80+): on a T4 it is not applicable, with the reason
    needs=("fp32_tensor_cores",),
    # fp32 at a batch where the convolutions dominate the step (a layout cannot help a launch-bound step)
    defaults={"resnet18": {"cuda": {"batch_size": 256}}},
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [16, 32, 64, 128, 256], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"GPU compute": 2},
    doctor_fixes=(
        DoctorFix(
            "cudnn_benchmark", "resnet18", place=4, gpu_only=True,
            how="torch.backends.cudnn.benchmark = True before the script starts (taught by the ResNet-18 ladder's "
                "cudnn_benchmark rung)",
            lines=("torch.backends.cudnn.benchmark = True  # time each convolution's algorithms once per shape, keep "
                   "the fastest",),
        ),
        DoctorFix(
            "channels_last", "resnet18", place=5,
            how="the top-level model and its 4-D inputs in channels_last at its first call",
            lines=("model = model.to(memory_format=torch.channels_last)  # NHWC weights",
                   "x = x.to(device, memory_format=torch.channels_last)  # NHWC batches"),
        ),
    ),
    frozen=("resnet18",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
