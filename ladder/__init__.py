"""The ladder: each workload's naive pipeline, then one technique more per rung, up to all of them.

Every rung has a stable id. A rung is the naive script with the techniques of the rungs up to it
switched on: the scripts ask `on("channels_last")` (an unknown id raises), and each technique is one
small function in ladder/techniques.py (`apply_channels_last`, `autocast`, `adam`, ...), so rung N and
rung N-1 differ by one technique. `changes` says what the rung must move against the rung below: a metric
(common.analysis.metrics) and its direction, or an observed fact the script records (run.extra["observed"]);
tests/integration/test_ladder.py checks every one of them. `make ladder` runs them (common/runners/climb.py) and
writes reports/ladder_<workload>.md.
"""
from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class RungSpec:
    id: str
    name: str
    adds: str
    parity: dict
    # what this rung must change against the one below: ("metric", name, "down"|"up"), ("config",
    # key, "up") or ("observed", key, the value the script records once the technique is on)
    changes: tuple = ()
    flags: dict = field(default_factory=dict)  # extra script flags per mode (cuda, cpu, smoke)
    needs: tuple = ()  # what the device must have (common.analysis.device), else the rung is skipped


@dataclass(frozen=True)
class LadderSpec:
    script: str
    what: str
    rungs: tuple
    target: str = ""  # the issues' target on an H100-class GPU, checked in the report of a GPU run
    judge: Callable | None = None  # the rungs that ran -> the report's lines on that target
    min_speedup: float = 1.0  # the last rung's cumulative speedup the target wants

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.rungs]


def met(ok: bool, miss: str) -> str:
    return "met" if ok else f"missed ({miss})"


def _serving_target(rows) -> list[str]:
    """The last rung's tail, and the compiled graph against the hand-captured one."""
    a = rows[-1].aggregate
    ratio = a.pooled.p99_ms / a.pooled.median_ms
    out = [f"  - last rung: p99 {a.pooled.p99_ms:.3f} ms, median {a.pooled.median_ms:.3f} ms: p99/median "
           f"{ratio:.2f}: " + met(ratio <= 2, "2 wanted")]
    by_id = {r.id: r for r in rows}
    if "cuda_graphs" in by_id and "hand_graph" in by_id:
        c, h = by_id["cuda_graphs"].aggregate.step_ms, by_id["hand_graph"].aggregate.step_ms
        out.append(f"  - compiled graph {c:.3f} ms vs hand-captured {h:.3f} ms: {c / h:.2f}x: "
                   + met(c / h <= 1.2, "1.2x wanted"))
    return out


# the GPT's rungs change the arithmetic, not the data: the attention pair's rule (16-bit rounding, fused kernels),
# and every rung's model causal (common.workloads.gpt.causal): a broken mask trains alike for hundreds of steps
GPT = {"early_steps": 3, "early_rtol": 0.02, "window": 5, "rtol": 0.03, "same": ("causal",),
       "expect": {"causal": True}}
# The best published figures for GPT-2 small: llm.c's reproduction of GPT-2 (124M), 10B tokens in 45 minutes on
# one node of 8 H100s (the baseline of KellerJordan/modded-nanogpt's README) and in 90 minutes on 8 A100s (llm.c
# discussion #481): 463K and 231K tokens/s per GPU. At GPT-2's 855 MFLOP per token (6 x 123.6M weights, the
# position table aside, plus 12 x 12 layers x 1,024 x 768 for attention) that is 396 and 198 TFLOP/s per GPU: rates
# of model FLOPs, which this GPT's smaller vocabulary (characters) does not change. No such figure for a T4 or an L4.
GPT2_FLOPS_PER_TOKEN = 6 * 123.6e6 + 12 * 12 * 1024 * 768
GPT_TFLOPS = {"H100": 10e9 / (45 * 60) / 8 * GPT2_FLOPS_PER_TOKEN / 1e12,
              "A100": 10e9 / (90 * 60) / 8 * GPT2_FLOPS_PER_TOKEN / 1e12}


def _gpt_target(rows) -> list[str]:
    """The last rung's model FLOPs per second (tokens/s x its FLOPs per token) against llm.c's per GPU of its
    class (an H200 is judged as an H100)."""
    a = rows[-1].aggregate
    per_token = (a.extra or {}).get("flops_per_token", {}).get("total")
    if not per_token:
        return ["  - last rung: no FLOPs per token recorded"]
    tflops = a.throughput_per_s * per_token / 1e12
    name = a.env.gpu_name if a.env else ""
    cls = "A100" if "A100" in (name or "") else "H100" if any(c in (name or "") for c in ("H100", "H200")) else None
    said = f"  - last rung: {a.throughput_per_s:,.0f} tokens/s, {tflops:.0f} TFLOP/s of model FLOPs"
    if cls is None:
        return [said + f": no published figure for {name or 'this GPU'}; not judged"]
    want = GPT_TFLOPS[cls]
    return [said + ": " + met(tflops >= want, f"{want / tflops:.2f}x short of llm.c's {want:.0f} on an {cls}")]


def _training_target(rows) -> list[str]:
    ips = rows[-1].aggregate.throughput_per_s
    return [f"  - last rung: {ips:,.0f} images/s: " + met(ips >= 18_000, f"{18_000 / ips:.2f}x short")]


LADDERS = {
    "churn": LadderSpec(
        script="ladder.churn_serving",
        what="serving: batches of 512 requests from the test split, probabilities returned to the host",
        target="the last rung's p99 at most 2x its median, at least 10x the naive throughput, and the compiled "
               "graph's median within 1.2x of the hand-captured graph's",
        judge=_serving_target, min_speedup=10,
        rungs=(
            RungSpec("naive", "naive", "the seed's pipeline: DataLoader over CPU tensors, copy per batch, "
                     "ProblematicChurnModel (extra ops, .item() in forward), torch.no_grad", SERVING),
            RungSpec("device_batching", "device batching",
                     "requests kept on the GPU, batches sliced from a device permutation", SERVING,
                     changes=(("metric", "data_ops", "down"),)),
            RungSpec("no_host_syncs", "no host syncs", "the forward's monitoring statistic stays on the device",
                     SERVING, changes=(("metric", "syncs_per_step", "down"),)),
            RungSpec("ops_folded", "ops folded",
                     "the two needless elementwise ops folded into the data once, the unread mean gone", SERVING,
                     changes=(("metric", "forward_ops", "down"),)),
            RungSpec("inference_mode", "inference_mode", "torch.inference_mode() instead of torch.no_grad()", SERVING,
                     changes=(("observed", "inference_mode", True),)),
            RungSpec("cuda_graphs", "CUDA graphs (compile)",
                     "torch.compile(mode=\"reduce-overhead\"): fused kernels replayed as one graph", SERVING,
                     changes=(("observed", "compiled", True), ("metric", "forward_ops", "down")), needs=("inductor",)),
            RungSpec("hand_graph", "hand-captured graph",
                     "one hand-captured CUDA graph of the forward in place of compile's (a static input buffer), the "
                     "answers copied to a page-locked buffer with non_blocking, one synchronize", SERVING,
                     changes=(("observed", "answer_buffer", "preallocated"),)),
        ),
    ),
    "resnet18": LadderSpec(
        script="ladder.resnet18_training",
        what="training: ResNet-18 on CIFAR-10, 224 px random-resized crops, Adam 1e-4",
        target="the last rung at least 18,000 images/s at 224 px and at least 36x the naive throughput",
        judge=_training_target, min_speedup=36,
        rungs=(
            RungSpec("naive", "naive", "the lab's baseline: PIL transforms in the training process (num_workers=0), "
                     "pageable copies, fp32, .item() metrics every step", TIGHT),
            RungSpec("loader_workers", "loader workers", "DataLoader workers, pin_memory, non_blocking, "
                     "persistent_workers, prefetch_factor", TIGHT,
                     changes=(("metric", "worker_cpu_ms_per_step", "up"),)),
            RungSpec("no_step_syncs", "no per-step syncs", "loss and accuracy summed on the device, read once", TIGHT,
                     changes=(("metric", "syncs_per_step", "down"),)),
            RungSpec("gpu_input", "GPU input pipeline",
                     "uint8 CIFAR-10 kept on the GPU, crop + flip + normalize there in batches", LOOSE,
                     changes=(("observed", "loader_workers", 0),)),
            RungSpec("channels_last", "channels_last", "NHWC memory format for the model and its inputs", LOOSE,
                     changes=(("observed", "channels_last", True),)),
            RungSpec("amp", "AMP", "torch.autocast to bfloat16 (fp16 with a GradScaler below sm_80: a T4)", LOOSE,
                     changes=(("observed", "autocast_16bit", True),)),
            RungSpec("cudnn_benchmark", "cudnn.benchmark", "cuDNN times its convolution algorithms for each shape "
                     "once and keeps the fastest", LOOSE, changes=(("observed", "cudnn_benchmark", True),)),
            RungSpec("fused_adam", "fused Adam", "Adam(fused=True) on CUDA (foreach on CPU)", LOOSE,
                     changes=(("metric", "optimizer_ops", "down"),)),
            RungSpec("compile", "torch.compile", "the model compiled with Inductor (fullgraph): BatchNorm + ReLU and "
                     "the other elementwise chains fused", LOOSE,
                     changes=(("observed", "compiled", True), ("metric", "forward_ops", "down")), needs=("inductor",)),
            RungSpec("cuda_graphs", "CUDA graphs", "mode=\"reduce-overhead\": the compiled forward and backward "
                     "replayed as CUDA graphs", LOOSE, changes=(("observed", "compile_mode", "reduce-overhead"),),
                     needs=("inductor",)),
            RungSpec("larger_batch", "batch 256", "batch 256 (CPU: 32), which the memory freed by AMP allows",
                     OTHER_BATCH, changes=(("config", "batch_size", "up"),),
                     flags={"cuda": ["--batch-size", "256"], "cpu": ["--batch-size", "32"],
                            "smoke": ["--batch-size", "8"]}),
            RungSpec("batch_512", "batch 512", "batch 512 (CPU: 64): more work per launch and per graph replay",
                     OTHER_BATCH, changes=(("config", "batch_size", "up"),),
                     flags={"cuda": ["--batch-size", "512"], "cpu": ["--batch-size", "64"],
                            "smoke": ["--batch-size", "12"]}),
        ),
    ),
    "gpt": LadderSpec(
        script="ladder.gpt_training",
        what="training: a GPT in nanoGPT's shape (GPT-2 small's sizes on a GPU) on Tiny Shakespeare, AdamW 1e-3",
        target=f"the last rung at least {GPT_TFLOPS['H100']:.0f} TFLOP/s of model FLOPs per GPU on an H100 and "
               f"{GPT_TFLOPS['A100']:.0f} on an A100, llm.c's GPT-2 (124M) reproduction (10B tokens in 45 minutes on "
               "8 H100s, in 90 on 8 A100s)",
        judge=_gpt_target, min_speedup=1.0,
        rungs=(
            RungSpec("naive", "naive", "fp32, attention written by hand (scores, mask, softmax, weighted sum), "
                     "AdamW's default implementation", GPT),
            RungSpec("sdpa", "fused attention", "scaled_dot_product_attention(is_causal=True): one fused kernel, no "
                     "T x T scores kept", GPT, changes=(("metric", "forward_ops", "down"),)),
            RungSpec("tf32", "TF32", "fp32 matmuls on TF32 tensor cores (sm_80+)", GPT,
                     changes=(("observed", "tf32", True),), needs=("tf32",)),
            RungSpec("amp", "AMP", "torch.autocast to bfloat16 (fp16 with a GradScaler below sm_80: a T4); SDPA gets "
                     "flash or cuDNN on sm_80+ (a T4's fp16: the memory-efficient kernel)", GPT,
                     changes=(("observed", "autocast_16bit", True),)),
            RungSpec("fused_adamw", "fused AdamW", "AdamW(fused=True) on CUDA (foreach on CPU)", GPT,
                     changes=(("metric", "optimizer_ops", "down"),)),
            RungSpec("compile", "regional compile", "each block compiled in place (fullgraph), one graph for all: "
                     "LayerNorm, GELU and the residual adds fused", GPT,
                     changes=(("observed", "compiled", True), ("metric", "forward_ops", "down")), needs=("inductor",)),
        ),
    ),
}


# churn serves batches of 512 (the seed's sweep found throughput still rising there); smoke stays tiny
DEFAULTS = {"churn": {"cuda": {"batch_size": 512}, "cpu": {"batch_size": 512}},
            "resnet18": {"cuda": {"steps": 100, "warmup": 15}}}


def spec(workload: str) -> LadderSpec:
    return LADDERS[workload]


def rung_index(workload: str, value: str) -> int:
    """A rung given by index or id -> its index."""
    ids = LADDERS[workload].ids
    if value in ids:
        return ids.index(value)
    if value.isdigit() and int(value) < len(ids):
        return int(value)
    raise ValueError(f"no rung {value!r} in the {workload} ladder: 0-{len(ids) - 1} or one of {', '.join(ids)}")


def rung_flag(workload: str):
    """For harness.start(extend=...): the --rung flag of a ladder script (an index or an id)."""
    import argparse

    count = len(LADDERS[workload].rungs)

    def parse(text):
        try:
            return rung_index(workload, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    def extend(parser):
        parser.add_argument("--rung", type=parse, default=count - 1, metavar="N|ID",
                            help=f"how far to climb: a rung's index or id (default {count - 1}: every technique); "
                                 f"ids: {', '.join(LADDERS[workload].ids)}")

    return extend


def skipped(workload: str, profile) -> dict[str, str]:
    """rung id -> why its technique does not exist on this device (its `needs` against the profile)."""
    found = {r.id: profile.not_applicable(r.needs) for r in LADDERS[workload].rungs} if profile else {}
    return {k: v for k, v in found.items() if v}


def switches(workload: str, rung: int, profile=None):
    """on(id) -> is that technique switched on at this rung? An id the ladder does not have raises.
    With the device's profile, a technique it lacks (a P100 and torch.compile) is never on."""
    ids = LADDERS[workload].ids
    active = set(ids[1:rung + 1]) - set(skipped(workload, profile))

    def on(technique: str) -> bool:
        if technique not in ids:
            raise KeyError(f"no technique {technique!r} in the {workload} ladder; its ids: {', '.join(ids)}")
        return technique in active

    return on
