"""The ladder: each workload's naive pipeline, then one technique more per rung, up to all of them.

A rung is the naive script with the first N techniques of its list switched on (`--rung N`), so
rung N and rung N-1 differ by one technique, and every rung is compared with rung 0 for parity.
`make ladder` runs them (common/ladder.py) and writes reports/ladder_<workload>.md.
"""
TIGHT = {"early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02}
# serving: each batch's mean churn probability; the same weights, so only float rounding differs
SERVING = {"what": "mean churn probability per served batch", "early_steps": 5, "early_rtol": 1e-4, "window": 10,
           "rtol": 1e-4}
# ResNet-18 from the GPU input pipeline on: the same augmentation (random-resized-crop + flip) done by
# another implementation (affine_grid on the device, not PIL), so every crop differs and single steps
# are not comparable; 10-step mean losses are (measured in a CPU smoke run: within 2% of the initial
# loss for every such rung). 16-bit math (AMP) and compiled kernels round differently on top.
LOOSE = {"early_steps": 0, "early_rtol": 0.0, "window": 10, "rtol": 0.05}
# a larger batch trains another trajectory: only the first window (losses near ln 10 from random
# weights) is comparable; every loss must be finite
OTHER_BATCH = {"early_steps": 0, "early_rtol": 0.0, "window": 10, "rtol": 0.10, "max_windows": 1}

RUNGS = {
    "churn": {
        "script": "ladder.churn_serving",
        "what": "serving: batches of 512 requests from the test split, probabilities returned to the host",
        "rungs": [
            {"name": "naive", "adds": "the seed's pipeline: DataLoader over CPU tensors, copy per batch, "
                                      "ProblematicChurnModel (extra ops, .item() in forward), torch.no_grad", "parity": SERVING},
            {"name": "device batching", "adds": "requests kept on the GPU, batches sliced from a device permutation",
             "parity": SERVING},
            {"name": "no host syncs", "adds": "the forward's monitoring statistic stays on the device", "parity": SERVING},
            {"name": "ops folded", "adds": "the two needless elementwise ops folded into the data once, the unread mean gone",
             "parity": SERVING},
            {"name": "inference_mode", "adds": "torch.inference_mode() instead of torch.no_grad()", "parity": SERVING},
            {"name": "CUDA graphs", "adds": "torch.compile(mode=\"reduce-overhead\"): fused kernels replayed as one graph",
             "parity": SERVING},
        ],
    },
    "resnet18": {
        "script": "ladder.resnet18_training",
        "what": "training: ResNet-18 on CIFAR-10, 224 px random-resized crops, Adam 1e-4",
        "rungs": [
            {"name": "naive", "adds": "the lab's baseline: PIL transforms in the training process (num_workers=0), "
                                      "pageable copies, fp32, .item() metrics every step", "parity": TIGHT},
            {"name": "loader workers", "adds": "DataLoader workers, pin_memory, non_blocking, persistent_workers, "
                                               "prefetch_factor", "parity": TIGHT},
            {"name": "no per-step syncs", "adds": "loss and accuracy summed on the device, read once", "parity": TIGHT},
            {"name": "GPU input pipeline", "adds": "uint8 CIFAR-10 kept on the GPU, crop + flip + normalize there in batches",
             "parity": LOOSE},
            {"name": "channels_last", "adds": "NHWC memory format for the model and its inputs", "parity": LOOSE},
            {"name": "AMP (bf16)", "adds": "torch.autocast to bfloat16", "parity": LOOSE},
            {"name": "torch.compile", "adds": "the model compiled with Inductor", "parity": LOOSE},
            {"name": "fused Adam", "adds": "Adam(fused=True) on CUDA (foreach on CPU)", "parity": LOOSE},
            {"name": "larger batch", "adds": "batch 256 (CPU: 32), which the memory freed by AMP allows",
             "parity": OTHER_BATCH, "flags": {"cuda": ["--batch-size", "256"], "cpu": ["--batch-size", "32"],
                                              "smoke": ["--batch-size", "8"]}},
        ],
    },
}


def rung_flag(workload: str):
    """For harness.start(extend=...): the --rung flag of a ladder script."""
    count = len(RUNGS[workload]["rungs"])

    def extend(parser):
        parser.add_argument("--rung", type=int, choices=range(count), default=count - 1, metavar=f"0-{count - 1}",
                            help=f"how many techniques to add to the naive pipeline (default {count - 1}: all)")

    return extend


def techniques(workload: str, rung: int) -> set[str]:
    """The names of the techniques rung `rung` switches on."""
    return {r["name"] for r in RUNGS[workload]["rungs"][1:rung + 1]}

# churn serves batches of 512 (the seed's sweep found throughput still rising there); smoke stays tiny
DEFAULTS = {"churn": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}},
            "resnet18": {"cuda": {"steps": 100, "warmup": 15}}}
