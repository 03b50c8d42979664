"""The views TensorBoard's profiler plugin gave a trace, read without torch (its plugin is deleted
upstream, and its pages load their drawing library from the web): each step's time split by what
filled it, the GPU's utilization and the kernels' SM efficiency and occupancy where the trace has them,
and the memory curve. The page that shows them: common/render/trace_page.py.

The split follows the plugin's rule: each instant of a step counts once, for the first of, in order,
a kernel on the GPU, a memcpy, a memset, a CUDA runtime call, the data loader, any other op on the
CPU; what is left is "other" (Python between ops, idle)."""
from common.analysis.traces import GPU_CATS, LAUNCH_CATS, read_trace

KINDS = ("kernel", "memcpy", "memset", "runtime", "data loading", "CPU op", "other")
STEP = "ProfilerStep#"


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _clip(spans, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def _less(spans, taken):
    """`spans` (merged) less the merged `taken`."""
    out = []
    for a, b in spans:
        cur = a
        for x, y in taken:
            if y <= cur or x >= b:
                continue
            if x > cur:
                out.append((cur, x))
            cur = max(cur, y)
        if cur < b:
            out.append((cur, b))
    return out


def _length(spans) -> float:
    return sum(b - a for a, b in spans)


def kind_of(e: dict) -> str | None:
    cat, name = e.get("cat"), str(e.get("name", ""))
    if cat == "kernel":
        return "kernel"
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if cat in LAUNCH_CATS:
        return "runtime"
    if cat in ("cpu_op", "user_annotation", "python_function") and name.startswith("enumerate(DataLoader)"):
        return "data loading"
    if cat == "cpu_op":
        return "CPU op"
    return None


def breakdown(events: list[dict]) -> list[dict]:
    """Per profiled step (ProfilerStep# ranges; a trace without them: one step over its events), the
    microseconds of each kind in KINDS, first come first counted, and the step's span."""
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(STEP)),
                   key=lambda e: e["ts"])
    timed = [e for e in events if e.get("ph") == "X" and kind_of(e)]
    if not steps and timed:
        lo = min(e["ts"] for e in timed)
        steps = [{"name": f"{STEP}0", "ts": lo, "dur": max(e["ts"] + e.get("dur", 0) for e in timed) - lo}]
    by_kind = {k: _merged([(e["ts"], e["ts"] + e.get("dur", 0)) for e in timed if kind_of(e) == k]) for k in KINDS}
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s.get("dur", 0)
        if any(kind_of(e) in ("kernel", "memcpy", "memset") for e in timed):  # GPU work may end after the CPU's step
            hi = max([hi] + [b for k in ("kernel", "memcpy", "memset") for a, b in by_kind[k] if lo <= a < hi])
        taken, row = [], {"step": s["name"][len(STEP):], "start_us": lo, "total_us": hi - lo}
        for k in KINDS[:-1]:
            mine = _less(_clip(by_kind[k], lo, hi), taken)
            row[k] = _length(mine)
            taken = _merged(taken + mine)
        row["other"] = max(0.0, (hi - lo) - _length(taken))
        out.append(row)
    return out


def gpu_figures(events: list[dict]) -> dict:
    """GPU utilization (the share of the profiled span with a kernel running) and, where the trace
    records them (CUDA's activity API), the kernels' SM efficiency and achieved occupancy, weighted by
    kernel time; None for what the trace lacks (a CPU trace lacks all)."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    if not kernels:
        return {"gpu_utilization": None, "sm_efficiency": None, "achieved_occupancy": None}
    span = breakdown(events)
    total = sum(r["total_us"] for r in span)
    busy = sum(r["kernel"] for r in span)

    def weighted(key, scale=1.0):  # over the kernels that record it, by their time
        pairs = [(e["args"][key] * scale, e.get("dur", 0)) for e in kernels if key in e.get("args", {})]
        time = sum(d for _, d in pairs)
        return sum(v * d for v, d in pairs) / time if time else None

    sm = [(min(e["args"]["blocks per SM"], 1.0), e.get("dur", 0))
          for e in kernels if "blocks per SM" in e.get("args", {})]
    sm_time = sum(d for _, d in sm)
    return {"gpu_utilization": busy / total if total else None,
            # the plugin's estimate: a kernel of fewer blocks than SMs leaves the rest idle while it runs
            "sm_efficiency": sum(v * d for v, d in sm) / sm_time if sm_time else None,
            "achieved_occupancy": weighted("est. achieved occupancy %", 1 / 100)}


def memory_curve(trace: dict) -> list[tuple[float, float]]:
    """(microseconds, MB allocated) at each allocator event the profiler recorded (profile_memory=True),
    on the device the trace's GPU work ran on, else the CPU's."""
    points = {}
    for e in trace.get("traceEvents", []):
        if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}):
            device = e["args"].get("Device Type", 0)
            points.setdefault(device, []).append((e["ts"], e["args"]["Total Allocated"] / 2**20))
    if not points:
        return []
    gpu = [d for d in points if d != 0]  # Device Type 0 is the CPU, 1 CUDA
    return sorted(points[gpu[0] if gpu else 0])


def read(trace_path) -> dict:
    """The whole trace's views, for the page."""
    trace = read_trace(trace_path)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    return {"breakdown": breakdown(events), **gpu_figures(events), "memory": memory_curve(trace),
            "gpu": any(e.get("cat") in GPU_CATS for e in events)}
