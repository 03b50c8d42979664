"""torch.compile: the graph captured once, ops fused into generated kernels, launches cut."""

from common.spec import AnswerParity, DoctorFix, LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="torch.compile",
    main="resnet18",  # the headline pair (make tour): the training pair its goal names first
    needs=("inductor",),  # Triton on CUDA (sm_70+); the C++ backend on a CPU (common.analysis.device)
    # Training: inductor fuses and reorders reductions, so the twins round differently and drift slowly
    # (ResNet-18's BatchNorm amplifies it); a broken graph shows in the first steps at once. The early
    # tolerance holds at batch 16 and widens as 1/sqrt(batch) below it (aggregate.early_tolerance): over
    # three seeds each, the first 5 losses (bf16 in both twins, CPU) were up to 2.6% apart at batches 2 and
    # 4 and 1.4% at 8, at most 0.66x of the tolerance there.
    # Serving: the same trained weights and requests: each customer's answer, in order, agrees to float
    # rounding (fp32 in both; a wrong customer or a stale batch is 0.1-0.9 off on trained weights).
    parity=LossParity(what="training loss", early_steps=5, early_rtol=0.02, at_batch=16, window=10, rtol=0.05),
    parity_by_pair={"churn_serving": AnswerParity(what="churn probability per request", atol=0.0001)},
    # (graph breaks and recompilations have their own line in the report: the eager twin has none)
    evidence=("gpu_idle_share", "ops_per_step", "first_step_s"),
    # Churn is the served model: batches of 512 requests (the seed's largest sweep sizes), results
    # copied back to the host as a caller would need them. ResNet-18 at batch 32: launch-bound on an
    # H100 once bf16 and channels_last make the math cheap, where CUDA graphs pay; at batch 256 (the
    # fusion pair, default mode) the GPU's work dominates and fusion is what is left to gain.
    defaults={
        "churn_serving": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}},
        "resnet18": {"cuda": {"batch_size": 32, "warmup": 20}},
        "resnet18_fusion": {"cuda": {"batch_size": 256, "warmup": 20}},
        # the first steps compile the blocks' forward and backward; two blocks in smoke, to show one graph serving both
        "gpt": {"cuda": {"warmup": 20}, "smoke": {"layers": 2}},
    },
    sweep=Sweep(
        pair="resnet18",
        flag="--batch-size",
        knob="batch size",
        values={"cuda": [8, 32, 64, 128, 256], "cpu": [2, 4, 8], "smoke": [2, 4]},
    ),
    # H100: this version's goals against the first H100 run's reference points; the fusion pair's, on both
    # classes, the ResNet-18 lab's "1.1-1.4x additional speedup from torch.compile" (default mode), its floor
    goals={
        "H100": {"resnet18": {"min_speedup": 1.5}, "churn_serving": {"min_speedup": 1.8},
                 "resnet18_fusion": {"min_speedup": 1.1}},
        "T4": {"resnet18_fusion": {"min_speedup": 1.1}},
    },
    # the costs the diagnosis names it for, and its place among their recipes
    cures={"launch overhead": 2, "GPU compute": 3, "CPU compute": 1},
    host_fix=2,  # it cuts a host-bound step's host work: its place among the fixes the report names
    doctor_fixes=(
        DoctorFix(
            "compile", "resnet18", place=7, needs=("inductor",),
            how="torch.compile of the top-level model's forward at its first call (the compilation lands in the "
                "warm-up, shown apart)",
            lines=('model = torch.compile(model)  # fused kernels; mode="reduce-overhead" where launches dominate',),
        ),
    ),
)
