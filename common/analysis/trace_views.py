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


MMA = ("hmma", "wgmma", "xmma", "tensorop", "16816", "1688", "884")  # tensor-core instructions in a kernel's name
MATMUL = ("gemm", "cutlass", "sm90_", "sm80_")  # a library matmul, on the tensor cores when its dtype is 16-bit or TF32
LOW = ("f16", "bf16", "tf32", "h16")


def tensor_cores(name: str) -> bool:
    """Whether a kernel's name says it ran on the tensor cores (the plugin's rule was a list of names; the
    trace itself does not record it, so this is a reading of the name)."""
    low = name.lower()
    return any(k in low for k in MMA) or (any(k in low for k in MATMUL) and any(t in low for t in LOW))


def op_table(events: list[dict], steps: int) -> list[dict]:
    """Per operator (and input shapes, where the trace recorded them): calls, host self and total time,
    device self and total time (the kernels its launches ran), each per step in microseconds."""
    from common.analysis.traces import enclosing

    ops = [e for e in events if e.get("cat") == "cpu_op"]
    around = enclosing(events)
    by_corr = {}
    for e in events:
        if e.get("cat") in GPU_CATS and "correlation" in e.get("args", {}):
            by_corr.setdefault(e["args"]["correlation"], []).append(e.get("dur", 0))
    rows: dict[tuple, dict] = {}

    def row(op):
        key = (op["name"], str(op.get("args", {}).get("Input Dims", "")))
        return rows.setdefault(key, {"name": key[0], "shapes": key[1], "calls": 0, "host_total": 0.0,
                                     "host_self": 0.0, "device_total": 0.0, "device_self": 0.0})

    for op in ops:
        r = row(op)
        r["calls"] += 1
        r["host_total"] += op.get("dur", 0)
        r["host_self"] += op.get("dur", 0)
        stack = around.get(id(op), [])
        if len(stack) > 1:  # its parent op's self time loses it
            row(stack[-2])["host_self"] -= op.get("dur", 0)
    for e in events:
        if e.get("cat") not in LAUNCH_CATS:
            continue
        device = sum(by_corr.get(e.get("args", {}).get("correlation"), []))
        stack = around.get(id(e), [])
        if not device or not stack:
            continue
        row(stack[-1])["device_self"] += device
        for op in {id(o): o for o in stack}.values():
            row(op)["device_total"] += device
    out = []
    for r in rows.values():
        out.append({**r, **{k: r[k] / steps for k in ("host_total", "host_self", "device_total", "device_self")},
                    "calls": r["calls"] / steps})
    return sorted(out, key=lambda r: (-r["device_self"], -r["host_self"]))


def kernel_table(events: list[dict], steps: int) -> list[dict]:
    """Per kernel name: calls and time per step, mean time, blocks per SM and estimated achieved
    occupancy (means over its calls, where recorded), and whether its name says tensor cores."""
    rows: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        r = rows.setdefault(e["name"], {"name": e["name"], "calls": 0, "total": 0.0, "blocks": [], "occupancy": []})
        r["calls"] += 1
        r["total"] += e.get("dur", 0)
        args = e.get("args", {})
        if "blocks per SM" in args:
            r["blocks"].append(args["blocks per SM"])
        if "est. achieved occupancy %" in args:
            r["occupancy"].append(args["est. achieved occupancy %"])
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return sorted(({"name": r["name"], "calls": r["calls"] / steps, "total": r["total"] / steps,
                    "mean": r["total"] / r["calls"], "blocks_per_sm": mean(r["blocks"]),
                    "occupancy": mean(r["occupancy"]), "tensor_cores": tensor_cores(r["name"])}
                   for r in rows.values()), key=lambda r: -r["total"])


COMM = ("nccl", "gloo", "allreduce", "all_reduce", "reducescatter", "allgather")


def overlap(events: list[dict]) -> dict | None:
    """Data-parallel runs: the GPU's compute kernels against its communication kernels (NCCL's), and the
    time both ran at once, in microseconds over the profiled steps; None without communication kernels."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    comm = _merged([(e["ts"], e["ts"] + e.get("dur", 0)) for e in kernels if any(c in e["name"].lower() for c in COMM)])
    if not comm:
        return None
    compute = _merged([(e["ts"], e["ts"] + e.get("dur", 0)) for e in kernels
                       if not any(c in e["name"].lower() for c in COMM)])
    both = _length(comm) - _length(_less(comm, compute))
    return {"compute_us": _length(compute), "communication_us": _length(comm), "overlapped_us": both}


def timeline(events: list[dict], step: int = 0, most: int = 4000) -> dict:
    """One profiled step's events for the page's timeline: rows by process and thread (a GPU's by
    stream), each event as [start us from the step's start, duration, name, kind], the longest kept where
    there are more than `most`."""
    steps = sorted((e for e in events if str(e.get("name", "")).startswith(STEP)), key=lambda e: e["ts"])
    if steps:
        s = steps[min(step, len(steps) - 1)]
        lo, hi = s["ts"], s["ts"] + s.get("dur", 0)
        gpu_end = [e["ts"] + e.get("dur", 0) for e in events if e.get("cat") in GPU_CATS and lo <= e["ts"] < hi]
        hi = max([hi] + gpu_end)
    else:
        lo = min((e["ts"] for e in events), default=0)
        hi = max((e["ts"] + e.get("dur", 0) for e in events), default=0)
    inside = [e for e in events if e["ts"] < hi and e["ts"] + e.get("dur", 0) > lo and e.get("cat") != "Trace"]
    inside = sorted(inside, key=lambda e: -e.get("dur", 0))[:most]
    rows: dict[str, list] = {}
    for e in inside:
        args = e.get("args", {})
        where = (f"GPU stream {args['stream']}" if e.get("cat") in GPU_CATS and "stream" in args
                 else f"CPU thread {e.get('tid')}")
        rows.setdefault(where, []).append([round(e["ts"] - lo, 3), round(e.get("dur", 0), 3), str(e.get("name", "")),
                                           kind_of(e) or str(e.get("cat", ""))])
    return {"span_us": hi - lo, "rows": {k: sorted(v) for k, v in sorted(rows.items())}}


def read(trace_path) -> dict:
    """The whole trace's views, for the page."""
    trace = read_trace(trace_path)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = max(1, sum(1 for e in events if str(e.get("name", "")).startswith(STEP)))
    return {"breakdown": breakdown(events), **gpu_figures(events), "memory": memory_curve(trace),
            "gpu": any(e.get("cat") in GPU_CATS for e in events), "ops": op_table(events, steps),
            "kernels": kernel_table(events, steps), "overlap": overlap(events), "timeline": timeline(events),
            "steps": steps}
