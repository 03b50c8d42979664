"""float8 training: torchao's convert_to_float8_training swaps each eligible nn.Linear for a Float8Linear,
whose matmuls run on float8 tensor cores (torch._scaled_mm) with a scale per tensor; compiled in both twins."""

from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="float8 training (torchao) against bf16, both compiled",
    needs=("float8", "inductor"),  # sm_89+ (an L4, an H100, an H200): an A100, a T4 and a CPU have no float8 matmuls
    # float8's 3-bit (e4m3) and 2-bit (e5m2) mantissas round each matmul's inputs far more coarsely than
    # bf16's 7 bits; torchao's training docs show the loss curves tracking bf16's over a whole run. The
    # first steps agree to a few percent, the windows more closely as the noise of single steps averages.
    parity=LossParity(what="training loss", early_steps=3, early_rtol=0.05, window=10, rtol=0.05, probe_rtol=0.15),
    evidence=("tflops", "peak_mb", "kernels_per_step"),
    # float8 pays where the matmuls are large (torchao's docs: from about 4,096 on each side, with the
    # tokens of a batch as the third): four blocks 4,096 wide, 8 x 1,024 tokens a step
    defaults={"gpt": {"cuda": {"batch_size": 8, "layers": 4, "heads": 32, "width": 4096}}},
    # `make sweep-float8`: the width decides it (each matmul is tokens x width x width or 4 x width), from
    # GPT-2 small's 768, where torchao's tables put float8 below bf16, to 6,144
    sweep=Sweep(
        pair="gpt",
        flag="--width",
        knob="model width",
        values={"cuda": [768, 1536, 2048, 3072, 4096, 6144], "cpu": [64, 128], "smoke": [32, 64]},
    ),
    frozen=("gpt",),  # tests/integration/test_frozen.py: its planted frozen twin fails parity
)
