"""torch.profiler around a few steps, and the evidence read from it.

One context manager (a schedule of 1 warm-up + N active steps, repeat=1) writes a TensorBoard /
Perfetto trace as reports/traces/<recipe>/<workload>_<variant>/<worker>.pt.trace.json. The evidence:
- the seed's four views of key_averages(): top ops by device time, self memory, CPU time, calls;
- from the trace: host syncs, kernels and ops per step, and the GPU's idle share;
- per phase (the script's run.phase ranges): host time, ops, kernels and their GPU time per step.
"""
import contextlib
import json
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from common.analysis.results_run import KindRow, KindView, MemoryArtifacts, OpRow, OpView, OpViews
from common.analysis.traces import GPU_CATS, LAUNCH_CATS, read_trace, union, union_length
from common.env import rank_world
from common.measure import memory

# host-blocking CUDA runtime calls; .item() on CUDA shows up as a cudaStreamSynchronize
SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
# the ops that force a sync when the tensor lives on a GPU (on CPU they are the only trace of one)
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item")
TOP_ROWS = 10


@contextlib.contextmanager
def profiler(trace_dir: Path, worker: str, device: torch.device, active_steps: int, with_stack: bool = False):
    """Yield a profiler; call .step() after each step, for active_steps + 1 steps."""
    trace_dir = Path(trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    final = trace_dir / f"{worker}.pt.trace.json"

    def write_trace(prof):
        # tensorboard_trace_handler's layout (<worker>.pt.trace.json in a run folder), but under a
        # fixed name and atomically: a re-run replaces its trace instead of adding a second span
        tmp = trace_dir / f".{worker}.{os.getpid()}.json.tmp"  # not matched by TensorBoard's loader
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, final)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=active_steps, repeat=1),
        on_trace_ready=write_trace,
        record_shapes=True,
        profile_memory=True,
        with_stack=with_stack,  # the memory timeline needs it; it slows profiling, so only then
    ) as prof:
        yield prof
    prof.trace_path = final


def mark_rank(prof) -> None:
    """HolisticTraceAnalysis reads a trace per rank; without this it warns and guesses rank 0. The
    profiler keeps metadata only while it records, so this is called after every profiled step.
    Under torchrun, the rank and world size it set."""
    rank, size = rank_world()
    prof.add_metadata_json("distributedInfo", json.dumps({"rank": rank, "world_size": size}))


def _first(obj, *names, default=0.0):
    for name in names:  # newer torch names first; older ones still exist with a FutureWarning
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


# the seed's layer-by-layer breakdown, by op name (forward and backward ops alike); first match wins
OP_KINDS = (
    ("linear", ("addmm", "::mm", "linear", "matmul", "bmm")),
    ("convolution", ("conv",)),
    ("batch_norm", ("batch_norm",)),
    ("relu", ("relu", "threshold")),
    ("dropout", ("dropout", "bernoulli")),
    ("sigmoid", ("sigmoid",)),
    ("loss", ("cross_entropy", "nll_loss", "log_softmax", "binary_cross")),
    ("pooling", ("pool",)),
    ("reduction", ("mean", "sum", "argmax", "::max")),
    ("copy", ("copy_", "_to_copy", "::to", "index", "stack", "cat")),
    ("elementwise", ("add", "mul", "sub", "div", "sqrt", "lerp", "fill_", "zero_", "_foreach", "where", "neg")),
)


def op_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in OP_KINDS if any(k in low for k in keys)), "other")


def op_views(averages, device: torch.device, steps: int, exclude: set[str]) -> OpViews:
    """The seed's four views, per step, top rows only, from a profiler's key_averages()."""
    cuda = device.type == "cuda"
    rows = []
    for e in averages:
        if e.key.startswith("ProfilerStep") or e.key in exclude:
            continue
        rows.append(OpRow(
            name=e.key,
            calls=e.count / steps,
            self_cpu_us=e.self_cpu_time_total / steps,
            cpu_total_us=e.cpu_time_total / steps,
            self_device_us=_first(e, "self_device_time_total", "self_cuda_time_total") / steps if cuda else None,
            self_mem_bytes=(_first(e, "self_device_memory_usage", "self_cuda_memory_usage") if cuda
                            else e.self_cpu_memory_usage) / steps,
        ))
    time_key = "self_device_us" if cuda else "self_cpu_us"

    def op_time(r):  # an OpRow's or a KindRow's time, under the time view's key
        return getattr(r, time_key) or 0.0

    kinds = {}
    for r in rows:
        k = kinds.setdefault(op_kind(r.name), KindRow(name=op_kind(r.name), **{time_key: 0.0}))
        setattr(k, time_key, op_time(k) + op_time(r))
        k.calls += r.calls
    top = lambda by: sorted(rows, key=by, reverse=True)[:TOP_ROWS]  # noqa: E731
    return OpViews(
        device_time=OpView(key=time_key, rows=top(op_time)),
        self_memory=OpView(key="self_mem_bytes", rows=top(lambda r: r.self_mem_bytes)),
        cpu_time=OpView(key="cpu_total_us", rows=top(lambda r: r.cpu_total_us)),
        calls=OpView(key="calls", rows=top(lambda r: r.calls)),
        by_kind=KindView(key=time_key, rows=sorted(kinds.values(), key=op_time, reverse=True)),
    )


def _inside(e, r) -> bool:
    return e.get("tid") == r.get("tid") and r["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= r["ts"] + r["dur"]


def _top_level(ops) -> int:
    """How many ops the code called directly: ops nested in another op (a foreach op's per-tensor
    fallback, an op's own sub-ops) are not counted again."""
    count, end = 0, float("-inf")
    for e in sorted(ops, key=lambda e: (e["ts"], -e.get("dur", 0))):
        if e["ts"] >= end:
            count, end = count + 1, e["ts"] + e.get("dur", 0)
    return count




def _autograd_threads(events) -> set:
    """Threads that run autograd's backward: on CUDA the engine runs it on its own worker thread, so
    a backward range on the main thread holds ops that live on another one."""
    return {e.get("tid") for e in events
            if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("autograd::engine::evaluate_function")}


def _in_range(e, r, also) -> bool:
    """e happens inside range r: on r's thread, or on one of the threads in `also` (autograd's)."""
    return (e.get("tid") == r.get("tid") or e.get("tid") in also) and r["ts"] <= e["ts"] \
        and e["ts"] + e.get("dur", 0) <= r["ts"] + r["dur"]


def phase_evidence(events, n: int, phases, cuda: bool) -> dict:
    """Per step and phase: host time in the range, the ops called in it (on its thread and on
    autograd's), and the kernels its launches started (launch and kernel share a correlation id)
    with their GPU time."""
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    launches = [e for e in events if e.get("cat") in LAUNCH_CATS]
    autograd = _autograd_threads(events)
    gpu_by_corr = {}
    for e in events:
        if e.get("cat") in GPU_CATS:
            gpu_by_corr.setdefault(e.get("args", {}).get("correlation"), []).append(e)
    out = {}
    for name in phases:
        ranges = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == name]
        if not ranges:
            continue
        inside = [[e for e in ops if _in_range(e, r, autograd)] for r in ranges]
        entry = {"host_ms": sum(r["dur"] for r in ranges) / 1000 / n,
                 "ops": sum(_top_level(e for e in found if e.get("tid") == tid)
                            for found in inside for tid in {e.get("tid") for e in found}) / n,
                 "kernels": None, "kernel_ms": None}
        if cuda:
            started = [k for e in launches for r in ranges if _in_range(e, r, autograd)
                       for k in gpu_by_corr.get(e.get("args", {}).get("correlation"), [])]
            entry.update(kernels=sum(1 for k in started if k.get("cat") == "kernel") / n,
                         kernel_ms=sum(k.get("dur", 0) for k in started) / 1000 / n)
        out[name] = entry
    return out


def _gaps(busy, start, end) -> list[tuple[float, float]]:
    """The stretches of [start, end] that the union `busy` leaves uncovered."""
    out, t = [], start
    for s, e in busy:
        if s > t:
            out.append((t, min(s, end)))
        t = max(t, e)
    if t < end:
        out.append((t, end))
    return [(s, e) for s, e in out if e > s]


def _overlap(a, b) -> float:
    """Total length where two unions overlap."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _per_step_ms(intervals, n) -> float:
    return union_length(intervals) / 1000 / n


def trace_evidence(trace_path: Path, device: torch.device, phases=()) -> dict:
    """Counts and times per step from the exported Chrome trace (the fields of results.Evidence)."""
    events = [e for e in read_trace(trace_path)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    n = max(len(steps), 1)
    if steps:  # only what happens inside the profiled steps (the profiler's own final sync is not a step's)
        bounds = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in steps)
        events = [e for e in events if any(a <= e["ts"] <= b for a, b in bounds) or e.get("cat") in GPU_CATS]
    count = lambda cat, names=None: sum(  # noqa: E731
        1 for e in events if e.get("cat") == cat and (names is None or e.get("name") in names))
    span = lambda es: [(e["ts"], e["ts"] + e.get("dur", 0)) for e in es]  # noqa: E731
    # scalar reads, except where the tensors stay on the CPU in a GPU run too: the optimizer's step
    # counters, the loader's indices
    cpu_side = [e for e in events if e.get("cat") == "user_annotation"
                and (str(e.get("name", "")).startswith("Optimizer.step") or e.get("name") == "data")]
    sync_ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::_local_scalar_dense"
                and not any(_inside(e, r) for r in cpu_side)]
    out = {
        "profiled_steps": len(steps),
        "ops_per_step": count("cpu_op") / n,
        "sync_ops_per_step": {name: count("cpu_op", {name}) / n for name in SYNC_OPS},  # all, as the profiler saw them
        "phases": phase_evidence(events, n, phases, device.type == "cuda"),
        "sync_apis_per_step": None, "memcpy_per_step": None, "gpu_busy_ms_per_step": None, "launch_ms_per_step": None,
        "idle_host_busy_ms_per_step": None,
    }
    out["profiled_step_ms"] = sum(e.get("dur", 0) for e in steps) / 1000 / n if steps else None
    if device.type == "cuda":
        sync_calls = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") in SYNC_APIS]
        gpu = span(e for e in events if e.get("cat") in GPU_CATS)
        start = min(e["ts"] for e in steps) if steps else min((s for s, _ in gpu), default=0)
        end = max([e["ts"] + e.get("dur", 0) for e in steps] + [t for _, t in gpu] or [start])
        whole = max(end - start, 1e-9)
        # host overhead: the GPU idle while the host is neither waiting for data nor blocked in a
        # sync, so busy with its own work (Python, ops, launches): what CUDA graphs and compile cut
        waiting = union(span([e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "data"]
                              + sync_calls + sync_ops))
        host_busy = _gaps(waiting, start, end)
        idle = _gaps(union(gpu), start, end)
        # a sync is a scalar read of a device tensor (which blocks inside it) or a sync call made on
        # its own; a read's own sync call is not counted twice
        alone = [c for c in sync_calls if not any(_inside(c, r) for r in sync_ops)]
        out.update(
            syncs_per_step=(len(sync_ops) + len(alone)) / n,
            sync_apis_per_step={name: count("cuda_runtime", {name}) / n for name in SYNC_APIS},
            # the host blocked: sync calls and the scalar reads that contain them, counted once
            sync_ms_per_step=_per_step_ms(span(sync_calls + sync_ops), n),
            kernels_per_step=count("kernel") / n,
            memcpy_per_step=count("gpu_memcpy") / n,
            gpu_idle_share=max(0.0, 1.0 - union_length(gpu) / whole),
            gpu_busy_ms_per_step=union_length(gpu) / 1000 / n,
            profiled_step_ms=whole / 1000 / n,  # from the first step's start to the GPU's last work
            idle_host_busy_ms_per_step=_overlap(idle, host_busy) / 1000 / n,
            launch_ms_per_step=_per_step_ms(span(e for e in events if e.get("cat") in LAUNCH_CATS
                                                 and "Launch" in str(e.get("name", ""))), n),
        )
    else:
        # no CUDA runtime on CPU: count the scalar reads that would block the host on a GPU; on a
        # CPU nothing runs ahead of the host, so a read costs only its own few microseconds
        out.update(syncs_per_step=len(sync_ops) / n, sync_ms_per_step=_per_step_ms(span(sync_ops), n),
                   kernels_per_step=None, gpu_idle_share=None)
    return out


def memory_artifacts(prof, out_dir: Path, worker: str, device: torch.device, snapshot: bool) -> MemoryArtifacts:
    """The profiler's memory timeline (HTML, by category: parameters, gradients, activations,
    optimizer state...) and, on CUDA, the allocator snapshot recorded over the profiled steps."""
    import warnings

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    found = MemoryArtifacts()
    timeline = out_dir / f"{worker}_memory_timeline.html"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in newest torch, still there
            prof.export_memory_timeline(str(timeline), device=f"cuda:{memory.cuda_index(device)}"
                                        if device.type == "cuda" else "cpu")
        found.timeline = str(timeline)
    except Exception as e:  # an older or newer torch without it
        found.notes.append(f"memory timeline unavailable ({type(e).__name__}: {str(e)[:120]})")
    if snapshot:
        path = out_dir / f"{worker}_memory_snapshot.pickle"
        try:
            torch.cuda.memory._dump_snapshot(str(path))
            found.snapshot = str(path)
            found.view_snapshot = memory.how_to_view(path)
        except Exception as e:
            found.notes.append(f"memory snapshot unavailable ({type(e).__name__})")
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
    elif device.type != "cuda":
        found.notes.append("allocator snapshot: CUDA only")
    return found
