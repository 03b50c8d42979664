"""Every figure a report shows, declared once: name, label, unit, how it is read from a variant's
aggregate (common.analysis.results_compare.VariantAggregate) and how it is formatted. The recipe reports, the
overview page, the ladder, the sweeps and the diagnosis all take their numbers from here. A recipe
lists in its spec's evidence the names its technique must move (sync_removal: "syncs_per_step"); the report
leads with those."""
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from common.analysis import ceiling
from common.analysis.results_compare import VariantAggregate

NONE = "n/a"  # a figure that was not measured (a CPU run has no GPU idle share)


def fmt(value, spec: str, none: str = NONE) -> str:
    """Every figure the reports and the terminal print: format(value, spec), or "n/a" when not measured."""
    return none if value is None else format(value, spec)

@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str  # "ms", "s", "MB", "share", "count", "TFLOP/s", "1/s", "B/s", "GFLOP"
    read: Callable[[VariantAggregate], float | None]
    fmt: str
    cpu_label: str | None = None  # what the figure means on a CPU run, where it differs
    short: str | None = None  # a table's column header

    def value(self, v: VariantAggregate | None):
        if v is None or v.status != "ok":
            return None
        return self.read(v)

    def text(self, v: VariantAggregate | None) -> str:
        x = self.value(v)
        return _bytes_per_s(x) if x is not None and self.unit == "B/s" else fmt(x, self.fmt)

    def title(self, cpu: bool = False) -> str:
        return self.cpu_label if cpu and self.cpu_label else self.label

    def column(self, cpu: bool = False) -> str:
        if cpu and self.name == "syncs_per_step":
            return ".item()/step"
        return self.short or self.title(cpu)

    def change(self, slow, fast) -> str:
        a, b = self.value(slow), self.value(fast)
        if a is None or b is None:
            return ""
        if self.unit == "share":
            return f"{(b - a) * 100:+.1f} points"
        if a == 0:
            return "from 0" if b else "same"
        if b == 0:
            return "gone"
        return f"{b / a:.2f}x"


def _bytes_per_s(x: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B/s"


def _ev(key):
    return lambda v: getattr(v.evidence, key) if v.evidence else None


def _phase(name, key):
    return lambda v: getattr(v.evidence.phases.get(name), key, None) if v.evidence else None


def _hta(read):
    return lambda v: read(v.evidence.hta) if v.evidence and v.evidence.hta else None


def tflops(v: VariantAggregate):
    return v.flops_per_step / v.step_ms / 1e9 if v.flops_per_step and v.step_ms else None


def peak_tflops(v: VariantAggregate) -> float | None:
    """The ceiling the step's tensor-core math could reach, weighted by where its FLOPs are: each
    matmul, convolution and attention op of the profiled steps at its own dtype's measured ceiling
    (TF32 where the stamp says it was on, the matmul flag for matmuls and cuDNN's for convolutions),
    combined as total FLOPs over the time each would take at its ceiling. None without such ops in
    the trace (a replayed CUDA graph shows none): no ceiling is guessed."""
    roof = v.evidence.roofline if v.evidence else None
    flops = seconds = 0.0
    for op in (roof.ops if roof else []):
        if op.kind in ("matmul", "convolution", "attention") and op.flops:
            tf32 = v.env.tf32_matmul if op.kind == "matmul" else v.env.tf32_cudnn
            peak = ceiling.peak_tflops(v.ceiling, op.dtype, bool(tf32))
            if not peak:
                return None
            flops, seconds = flops + op.flops, seconds + op.flops / peak
    return flops / seconds if seconds else None


def _mfu(v: VariantAggregate):
    """Over the ceiling its math could reach (peak_tflops): an fp32 step against fp32's (TF32's where
    on), a T4's fp16 against fp16's, never against a ceiling its math could not reach."""
    achieved, peak = tflops(v), peak_tflops(v)
    return achieved / peak if achieved is not None and peak else None


def _held(v):
    """The largest rank's training state (common.distributed.held), MB."""
    ranks = ((v.extra or {}).get("ddp") or {}).get("ranks") or []
    totals = [sum(r["held"].values()) for r in ranks if r.get("held")]
    return max(totals) if totals else None


def _ddp(key):  # what common.distributed.settle gathered over the ranks (the ddp recipe)
    return lambda v: (v.extra.get("ddp") or {}).get(key)


def _mean_overlap(found: dict | None):
    shares = list(((found or {}).get("per_rank") or {}).values())
    return sum(shares) / len(shares) if shares else None


def _compile(read):
    return lambda v: read(v.compile) if v.compile else None


_ALL = [
    Metric("step_ms", "ms per step (each process's timed stretch over its steps; the median over processes)", "ms",
           lambda v: v.step_ms, ".3f", short="ms/step"),
    Metric("median_ms", "median single step, ms (pooled steps)", "ms", lambda v: v.pooled.median_ms, ".3f",
           short="median ms"),
    Metric("p95_ms", "p95 step, ms (pooled steps)", "ms", lambda v: v.pooled.p95_ms, ".3f", short="p95 ms"),
    Metric("p99_ms", "p99 step, ms (pooled steps)", "ms", lambda v: v.pooled.p99_ms, ".3f", short="p99 ms"),
    Metric("between_cv", "CV between processes", "share", lambda v: v.between_cv, ".1%", short="CV between processes"),
    Metric("within_cv", "CV within a process (median)", "share", lambda v: v.within_cv, ".1%", short="CV within"),
    Metric("throughput", "samples/s", "1/s", lambda v: v.throughput_per_s, ",.0f", short="samples/s"),
    Metric("bytes_per_s", "request + answer bytes moved per second", "B/s",
           lambda v: v.bytes_per_step * 1000 / v.step_ms if v.bytes_per_step and v.step_ms else None, ""),
    Metric("peak_mb", "peak memory, MB", "MB", lambda v: v.memory.peak_mb if v.memory else None, ".0f",
           "peak memory, MB (CPU: the process's peak RSS)", short="peak MB"),
    Metric("syncs_per_step", "host syncs per step", "count", _ev("syncs_per_step"), ".1f",
           ".item() calls per step (CPU proxy for syncs)", short="syncs/step"),
    Metric("sync_ms_per_step", "host blocked in syncs, ms per step", "ms", _ev("sync_ms_per_step"), ".3f"),
    Metric("kernels_per_step", "GPU kernels per step", "count", _ev("kernels_per_step"), ".0f", short="kernels/step"),
    Metric("ops_per_step", "aten ops per step", "count", _ev("ops_per_step"), ".0f"),
    Metric("launch_ms_per_step", "host in CUDA launch calls, ms per step", "ms", _ev("launch_ms_per_step"), ".3f"),
    Metric("gpu_busy_ms_per_step", "GPU busy, ms per step (profiled)", "ms", _ev("gpu_busy_ms_per_step"), ".3f"),
    Metric("gpu_idle_share", "GPU idle share (profiled steps)", "share", _ev("gpu_idle_share"), ".0%",
           short="GPU idle"),
    Metric("hta_idle_share", "GPU idle share, HolisticTraceAnalysis", "share", _hta(lambda h: h.idle_share), ".0%"),
    Metric("hta_blocked_ms", "host blocked on a full launch queue, ms per step (HTA)", "ms",
           _hta(lambda h: h.blocked_on_full_queue_ms_per_step), ".3f"),
    Metric("gflop_per_step", "GFLOP per step (FlopCounterMode)", "GFLOP",
           lambda v: v.flops_per_step / 1e9 if v.flops_per_step else None, ".3f"),
    Metric("tflops", "achieved TFLOP/s at the figure's step", "TFLOP/s", tflops, ".3g", short="TFLOP/s"),
    Metric("mfu", "MFU: share of the measured matmul ceiling of the dtype its math ran in", "share", _mfu, ".1%",
           short="MFU"),
    Metric("warmup_s", "warm-up, s (median over processes)", "s", lambda v: median(v.warmup_s) if v.warmup_s else None,
           ".2f"),
    Metric("first_step_s", "first step, s (compilation, autotuning)", "s", lambda v: v.host.first_step_s, ".2f"),
    Metric("data_wait_share", "share of step time the device waited for data", "share",
           lambda v: v.host.data_wait_share, ".1%", "share of step time waiting for data"),
    Metric("host_data_share", "host time in next(batches), share of wall time", "share",
           lambda v: v.host.host_data_share, ".1%"),
    Metric("data_wait_ms", "host time in next(batches), ms (median)", "ms", lambda v: v.host.host_data_ms_median,
           ".3f"),
    Metric("cpu_ms_per_step", "CPU ms per step, training process (all threads)", "ms",
           lambda v: v.host.cpu_ms_per_step, ".2f"),
    Metric("worker_cpu_ms_per_step", "CPU ms per step, loader workers", "ms", lambda v: v.host.worker_cpu_ms_per_step,
           ".2f"),
    Metric("data_ops", "data: aten ops called per step", "count", _phase("data", "ops"), ".0f"),
    Metric("optimizer_kernels", "optimizer: GPU kernels per step", "count", _phase("optimizer", "kernels"), ".0f"),
    Metric("optimizer_ops", "optimizer: aten ops called per step", "count", _phase("optimizer", "ops"), ".0f"),
    Metric("optimizer_host_ms", "optimizer: host ms per step (profiled)", "ms", _phase("optimizer", "host_ms"), ".3f"),
    Metric("optimizer_gpu_ms", "optimizer: GPU kernel ms per step (profiled)", "ms", _phase("optimizer", "kernel_ms"),
           ".3f"),
    Metric("forward_kernels", "forward: GPU kernels per step", "count", _phase("forward", "kernels"), ".0f"),
    Metric("forward_ops", "forward: aten ops called per step", "count", _phase("forward", "ops"), ".0f"),
    Metric("backward_ops", "backward: aten ops called per step", "count", _phase("backward", "ops"), ".0f"),
    Metric("forward_host_ms", "forward: host ms per step (profiled)", "ms", _phase("forward", "host_ms"), ".3f"),
    Metric("allreduce_per_step", "all-reduce calls per optimizer step (DDP communication hook)", "count",
           _ddp("allreduce_per_step"), ".1f", short="all-reduces/step"),
    Metric("allreduce_mb_per_step", "MB all-reduced per optimizer step", "MB", _ddp("allreduce_mb_per_step"), ".2f"),
    Metric("comm_overlap", "communication overlapped with computation, mean over ranks (HTA)", "share",
           lambda v: _mean_overlap(_ddp("comm_overlap")(v)), ".0%"),
    Metric("held_mb", "training state held per rank: parameters + gradients + optimizer state, MB (largest rank)",
           "MB", lambda v: _held(v), ".1f"),
    Metric("allgather_per_step", "all-gathers per optimizer step (FSDP)", "count",
           _ddp("all_gather_into_tensor_per_step"), ".1f"),
    Metric("reducescatter_per_step", "reduce-scatters per optimizer step (FSDP)", "count",
           _ddp("reduce_scatter_tensor_per_step"), ".1f"),
    Metric("distinct_digests", "distinct parameter sets across ranks after the run (1: identical)", "count",
           _ddp("distinct_digests"), ".0f"),
    Metric("graphs", "compiled graphs", "count", _compile(lambda c: c.graphs), ".0f"),
    Metric("graph_breaks", "graph breaks", "count", _compile(lambda c: c.graph_breaks), ".0f"),
    Metric("recompiles", "recompilations", "count", _compile(lambda c: c.recompiles), ".0f"),
]
METRICS = {m.name: m for m in _ALL}
# the columns of a variant's row in a recipe report and in the ladder
TABLE = ("step_ms", "median_ms", "p95_ms", "p99_ms", "between_cv", "within_cv", "throughput", "peak_mb",
         "syncs_per_step", "kernels_per_step", "gpu_idle_share", "tflops", "mfu")


def get(name: str) -> Metric:
    return METRICS[name]
