"""fp32 precision: strict IEEE fp32 against TF32 for matmuls and convolutions.

On Ampere and newer GPUs, "fp32" is not one thing: TF32 tensor cores keep fp32's range with a
10-bit mantissa. PyTorch's default is TF32 for cuDNN convolutions and strict fp32 for matmuls
(`torch.backends.cuda.matmul.fp32_precision`, `torch.backends.cudnn.conv.fp32_precision`, torch
2.9's API; the legacy `allow_tf32` flags and `torch.set_float32_matmul_precision` before it); the
stamp of every result records both. TF32 needs sm_80: elsewhere the recipe is "not applicable".
"""

from common.spec import DoctorFix, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="fp32 precision: strict fp32 vs TF32",
    main="resnet18",  # the headline pair (make tour): TF32 where matmuls and convolutions dominate
    needs=("tf32",),  # what the device must have (common.analysis.device), else not applicable
    # TF32 rounds every product's inputs to 10 mantissa bits: the losses drift apart slowly, within
    # the tolerance of 16-bit AMP (whose mantissa is shorter still).
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.03, at_batch=16, window=10, rtol=0.05),
    evidence=("gpu_busy_ms_per_step", "tflops", "mfu"),
    defaults={"resnet18": {"cuda": {"batch_size": 128}}},
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [16, 32, 64, 128, 256], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    doctor_fixes=(
        DoctorFix(
            "tf32", "resnet18", place=3, gpu_only=True, needs=("tf32",),
            how="TF32 matmuls and convolutions (fp32_precision 'tf32', the legacy allow_tf32 flags mirrored) before "
                "the script starts",
            lines=("torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the legacy flags "
                   "first: a library that reads them (Lightning) must not raise",
                   'torch.backends.cuda.matmul.fp32_precision = "tf32"  # TF32 matmuls (sm_80+): fp32 range, 10-bit '
                   "mantissa",
                   'torch.backends.cudnn.conv.fp32_precision = "tf32"  # and convolutions'),
        ),
    ),
    frozen=("churn",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
