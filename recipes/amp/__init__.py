"""Automatic mixed precision: matmuls and convolutions in 16-bit, the rest in fp32."""

from common.spec import DoctorFix, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="Automatic mixed precision (AMP)",
    main="resnet18",  # the headline pair (make tour): its goal's; AMP pays where the math dominates
    # 16-bit rounding moves each loss a little and the twins drift apart slowly: measured on CPU over
    # 140 steps, the first 5 steps agree within 1.4% and 10-step mean losses within 2.4% of the initial
    # loss, while a twin that stops learning is 22-82% off. A wrong cast or a missing loss scale shows
    # in the first steps; divergence shows in the windows.
    # early_rtol holds at batch 16 and widens as 1/sqrt(batch) below it: the bf16 twin's first 5 losses were
    # up to 3.4% off at batch 2 and 1.9% at 4 (ResNet-18, CPU), 0.37% at 128 (ResNet-18) and 0.94% at 64
    # (churn) on the first H100 run: at most 0.4x of the tolerance
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.03, at_batch=16, window=10, rtol=0.05),
    # the GPT's batch is sequences of hundreds of tokens each, not images, so the rule is not widened for
    # its batch size: measured on a CPU over three seeds, bf16 against fp32, the first 5 losses agreed
    # within 0.02% at CPU sizes (batch 4, 128 tokens) and 0.006% at smoke size
    parity_by_pair={"gpt": LossParity(what="training loss", early_steps=5, early_rtol=0.03, window=10, rtol=0.05)},
    evidence=("peak_mb",),  # 16-bit activations: less memory; the speed is the headline
    # AMP speeds up the math, so the pair runs where the math dominates: at the seed's batch of 32 an
    # H100 spends much of a ResNet-18 step launching kernels (see the README and the sweep).
    defaults={"resnet18": {"cuda": {"batch_size": 256}}},
    # `make sweep-amp`: the batch size decides whether the step is launch-bound or math-bound
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [16, 32, 64, 128, 256], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    # H100: this version's goal against the first H100 run's reference points; T4: the ResNet-18 lab's
    # "1.5-2.5x speedup, 30-40% memory reduction", each its range's floor
    goals={
        "H100": {"resnet18": {"min_speedup": 1.4, "lower_memory": True}},
        "T4": {"resnet18": {"min_speedup": 1.5, "max_memory_share": 0.70}},
    },
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"GPU compute": 1},
    doctor_fixes=(
        DoctorFix(
            "amp", "resnet18", place=2,
            how="16-bit autocast around each call of the top-level model, its output cast back to float32 (fp16 "
                "with a loss scale where the GPU has no bf16)",
            lines=("amp_dtype = torch.bfloat16  # sm_80+ (A100, H100) and a CPU; torch.float16 below (a T4), with the "
                   "scaler",
                   "scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)  # fp16's loss "
                   "scale",
                   "with torch.autocast(device.type, dtype=amp_dtype):  # the forward and the loss; matmuls in 16-bit",
                   "    loss = criterion(model(x), y)",
                   "scaler.scale(loss).backward()  # in place of loss.backward()",
                   "scaler.step(optimizer)  # in place of optimizer.step(): skips a step whose gradients overflowed",
                   "scaler.update()"),
        ),
    ),
)
