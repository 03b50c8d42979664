"""The views TensorBoard's profiler plugin gave a trace, read without torch (its plugin is deleted
upstream, and its pages load their drawing library from the web): each step's time split by what
filled it, the GPU's utilization and the kernels' SM efficiency and occupancy where the trace has them,
and the memory curve. The page that shows them: common/render/trace_page.py.

The split follows the plugin's rule: each instant of a step counts once, for the first of, in order,
a kernel on the GPU, a memcpy, a memset, a CUDA runtime call, the data loader, any other op on the
CPU; what is left is "other" (Python between ops, idle)."""
from common.analysis.traces import GPU_CATS, LAUNCH_CATS, read_trace, union, union_length

KINDS = ("kernel", "memcpy", "memset", "runtime", "data loading", "CPU op", "other")
STEP = "ProfilerStep#"


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


def kind_of(e: dict) -> str | None:
    """The plugin's categories: CUDA driver launches (Triton's, Inductor's) count as runtime too, and NCCL's
    kernels as kernels (the plugin split those into a communication category)."""
    cat, name = e.get("cat"), str(e.get("name", ""))
    if cat == "kernel":
        return "kernel"
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if cat in LAUNCH_CATS:
        return "runtime"
    if cat in ("cpu_op", "user_annotation") and (name.startswith("enumerate(DataPipe)#") or (
            name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__"))):
        return "data loading"
    if cat == "cpu_op" or (cat == "user_annotation" and not name.startswith(STEP)):
        return "CPU op"
    return None


GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def steps_of(events: list[dict]) -> list[dict]:
    """The profiled steps, each {"name", "ts", "end"}, bounded as the plugin bounded them: a step ends at
    the later of its CPU range's end and the end of the last GPU work its own launches (runtime or driver
    calls inside its CPU range, matched by correlation id) started; it starts at the later of its CPU
    range's start and the previous step's end, so steps never overlap and a lagging GPU's work stays with
    the step that launched it. A trace without ProfilerStep ranges: one step over its CPU events."""
    cpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
                  and str(e.get("name", "")).startswith(STEP)), key=lambda e: e["ts"])
    if not cpu:
        own = [e for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_WORK]
        if not own:
            return []
        lo = min(e["ts"] for e in own)
        return [{"name": f"{STEP}0", "ts": lo, "end": max(e["ts"] + e.get("dur", 0) for e in own), "cpu_end": None}]
    gpu_end = {}
    for e in events:
        if e.get("cat") in GPU_WORK and "correlation" in e.get("args", {}):
            c = e["args"]["correlation"]
            gpu_end[c] = max(gpu_end.get(c, 0), e["ts"] + e.get("dur", 0))
    launches = sorted((e["ts"], e.get("args", {}).get("correlation")) for e in events
                      if e.get("cat") in LAUNCH_CATS)
    out, previous = [], None
    for s in cpu:
        lo, hi = s["ts"], s["ts"] + s.get("dur", 0)
        last = max((gpu_end.get(c, 0) for t, c in launches if lo <= t <= hi), default=0)
        start = lo if previous is None else max(lo, previous)
        end = max(hi, last)
        out.append({"name": s["name"], "ts": start, "end": end, "cpu_end": hi})
        previous = end
    return out


def breakdown(events: list[dict]) -> list[dict]:
    """Per profiled step (steps_of), the microseconds of each kind in KINDS, first come first counted,
    and the step's span."""
    timed = [e for e in events if e.get("ph") == "X" and kind_of(e)]
    by_kind = {k: union([(e["ts"], e["ts"] + e.get("dur", 0)) for e in timed if kind_of(e) == k]) for k in KINDS}
    out = []
    for s in steps_of(events):
        lo, hi = s["ts"], s["end"]
        taken, row = [], {"step": s["name"][len(STEP):], "start_us": lo, "total_us": hi - lo}
        for k in KINDS[:-1]:
            mine = _less(_clip(by_kind[k], lo, hi), taken)
            row[k] = union_length(mine)
            taken = union(taken + mine)
        row["other"] = max(0.0, (hi - lo) - union_length(taken))
        out.append(row)
    return out


def window(events: list[dict]) -> tuple[float, float] | None:
    """The profiled steps' span: the first step's start to the last step's end."""
    steps = steps_of(events)
    return (steps[0]["ts"], steps[-1]["end"]) if steps else None


def gpu_figures(events: list[dict]) -> dict:
    """The plugin's three GPU figures over the profiled steps' window (None for what the trace lacks: a CPU
    trace lacks all): GPU utilization, the window's share with a kernel running; estimated SM efficiency,
    the window's mean of min(1, the blocks per SM of the kernels running at once), so never above the
    utilization; estimated achieved occupancy, the kernels' own, weighted by their time. One GPU's: the
    first device's kernels."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    span = window(events)
    if not kernels or not span:
        return {"gpu_utilization": None, "sm_efficiency": None, "achieved_occupancy": None}
    device = kernels[0].get("args", {}).get("device")
    lo, hi = span
    kernels = [e for e in kernels if e.get("args", {}).get("device") == device
               and e["ts"] < hi and e["ts"] + e.get("dur", 0) > lo]
    if not kernels or hi <= lo:
        return {"gpu_utilization": None, "sm_efficiency": None, "achieved_occupancy": None}
    clipped = [(max(e["ts"], lo), min(e["ts"] + e.get("dur", 0), hi), e.get("args", {})) for e in kernels]
    busy = union_length(union([(a, b) for a, b, _ in clipped]))
    edges = []  # the blocks per SM running at each instant: +bps at a kernel's start, -bps at its end
    for a, b, args in clipped:
        bps = args.get("blocks per SM", 0) or 0
        if bps > 0:
            edges += [(a, bps), (b, -bps)]
    covered, level, last = 0.0, 0.0, None
    for t, d in sorted(edges):
        if last is not None:
            covered += min(1.0, level) * (t - last)
        level, last = level + d, t
    timed = [(args["est. achieved occupancy %"] / 100, b - a) for a, b, args in clipped
             if "est. achieved occupancy %" in args]
    occupancy_time = sum(d for _, d in timed)
    return {"gpu_utilization": busy / (hi - lo),
            "sm_efficiency": covered / (hi - lo) if edges else None,
            "achieved_occupancy": sum(v * d for v, d in timed) / occupancy_time if occupancy_time else None}


def memory_curve(trace: dict) -> dict[str, list[tuple[float, float]]]:
    """Per device, (microseconds, MB allocated) at each allocator event the profiler recorded
    (profile_memory=True): each GPU's (a process may use several), else the CPU's."""
    points: dict[tuple, list] = {}
    for e in trace.get("traceEvents", []):
        args = e.get("args", {})
        if e.get("name") == "[memory]" and "Total Allocated" in args:
            device = (args.get("Device Type", 0), args.get("Device Id", 0))  # type 0 is the CPU, 1 CUDA
            points.setdefault(device, []).append((e["ts"], args["Total Allocated"] / 2**20))
    gpus = sorted(d for d in points if d[0] != 0)
    if gpus:
        return {f"GPU {i}": sorted(points[(t, i)]) for t, i in gpus}
    return {"CPU": sorted(p for d, found in points.items() for p in found)} if points else {}


# read from a kernel's name (the trace does not record it): tensor-core instructions or libraries that only use
# them; a library matmul on 16-bit or TF32 data; never an FP32-core (ffma, simt) or bookkeeping kernel
MMA = ("hmma", "wgmma", "xmma", "tensorop", "wmma", "s16816", "s1688", "h16816", "h1688", "h884", "s884", "i8816",
       "nvjet", "flash_", "fmha", "sdpa", "cutlass3x")
MATMUL = ("gemm", "cutlass", "sm90_", "sm80_", "triton_tem")
LOW = ("f16", "bf16", "tf32", "h16")
NOT = ("ffma", "simt", "init_device_workspace", "splitkreduce")


def tensor_cores(name: str) -> bool:
    low = name.lower()
    if any(k in low for k in NOT):
        return False
    return (any(k in low for k in MMA) or (any(k in low for k in MATMUL) and any(t in low for t in LOW))
            or ("triton_tem" in low and "mm" in low))


def op_table(events: list[dict], steps: int) -> list[dict]:
    """Per operator (and input shapes, where the trace recorded them): calls, host self and total time,
    device self and total time (the kernels its launches ran), each per step in microseconds. Host self
    time is the plugin's: less the ops it called and its own CUDA runtime calls (launches, syncs).
    Kernels launched outside any operator (a replayed CUDA graph's: cudaGraphLaunch from graph.replay())
    get a row of their launch's own, so that their time is not lost from the table."""
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

    def outside(launch):  # kernels launched outside any operator: a replayed CUDA graph's, from graph.replay()
        kind = "CUDA graph replay" if "Graph" in launch["name"] else "no operator"
        name = f"{launch['name']} ({kind})"
        r = row({"name": name})
        r["calls"] += 1
        return r

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
        if not stack:
            if device:
                r = outside(e)
                r["device_self"] += device
                r["device_total"] += device
                r["host_total"] += e.get("dur", 0)
                r["host_self"] += e.get("dur", 0)
            continue
        row(stack[-1])["host_self"] -= e.get("dur", 0)
        if not device:
            continue
        row(stack[-1])["device_self"] += device
        for op in {id(o): o for o in stack}.values():
            row(op)["device_total"] += device
    out = []
    for r in rows.values():
        r["host_self"] = max(r["host_self"], 0.0)  # rounding in the trace's microseconds, never a negative time
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
        if "blocks per SM" in args:  # weighted by the call's time, as the plugin's means were
            r["blocks"].append((args["blocks per SM"], e.get("dur", 0)))
        if "est. achieved occupancy %" in args:
            r["occupancy"].append((args["est. achieved occupancy %"], e.get("dur", 0)))
    mean = lambda xs: sum(v * d for v, d in xs) / sum(d for _, d in xs) if sum(d for _, d in xs) else None  # noqa: E731
    return sorted(({"name": r["name"], "calls": r["calls"] / steps, "total": r["total"] / steps,
                    "mean": r["total"] / r["calls"], "blocks_per_sm": mean(r["blocks"]),
                    "occupancy": mean(r["occupancy"]), "tensor_cores": tensor_cores(r["name"])}
                   for r in rows.values()), key=lambda r: -r["total"])


COMM = ("nccl", "gloo", "allreduce", "all_reduce", "reducescatter", "allgather")


def overlap(events: list[dict]) -> dict | None:
    """Data-parallel runs: the GPU's compute kernels against its communication kernels (NCCL's), and the
    time both ran at once, in microseconds over the profiled steps' window; None without communication."""
    span = window(events)
    kernels = [e for e in events if e.get("cat") == "kernel" and span and span[0] <= e["ts"] < span[1]]
    comm = union([(e["ts"], e["ts"] + e.get("dur", 0)) for e in kernels if any(c in e["name"].lower() for c in COMM)])
    if not comm:
        return None
    compute = union([(e["ts"], e["ts"] + e.get("dur", 0)) for e in kernels
                       if not any(c in e["name"].lower() for c in COMM)])
    both = union_length(comm) - union_length(_less(comm, compute))
    return {"compute_us": union_length(compute), "communication_us": union_length(comm), "overlapped_us": both}


def _depths(row: list[list]) -> None:
    """Each event's nesting depth in its row (an op inside another op, a kernel under its annotation),
    appended to it: [start, duration, name, kind, depth]."""
    open_ends: list[float] = []
    # the enclosing first: the longer, and on a tie the annotation (a range its own kernel may fill exactly)
    for e in sorted(row, key=lambda e: (e[0], -e[1], e[3] != "gpu_user_annotation")):
        while open_ends and open_ends[-1] <= e[0]:
            open_ends.pop()
        e.append(len(open_ends))
        open_ends.append(e[0] + e[1])


def timeline(events: list[dict], step: int = 0, most: int = 4000) -> dict:
    """One profiled step's events for the page's timeline (steps_of's bounds): rows by process and thread
    on the CPU, by device and stream on the GPU, each event as [start us from the step's start, duration,
    name, kind, nesting depth]; the longest `most` where there are more, and how many there were."""
    steps = steps_of(events)
    if not steps:
        return {"span_us": 0.0, "rows": {}, "shown": 0, "of": 0}
    s = steps[min(step, len(steps) - 1)]
    lo, hi = s["ts"], s["end"]
    inside = [e for e in events if e.get("ph") == "X" and e["ts"] < hi and e["ts"] + e.get("dur", 0) > lo
              and e.get("cat") != "Trace"]
    shown = sorted(inside, key=lambda e: -e.get("dur", 0))[:most]
    rows: dict[tuple, list] = {}
    for e in shown:
        args = e.get("args", {})
        gpu = e.get("cat") in GPU_WORK or e.get("cat") == "gpu_user_annotation"
        where = ((0, args.get("device", e.get("pid")), args.get("stream", e.get("tid"))) if gpu
                 else (1, e.get("pid"), e.get("tid")))
        rows.setdefault(where, []).append([round(e["ts"] - lo, 3), round(e.get("dur", 0), 3),
                                           str(e.get("name", "")), kind_of(e) or str(e.get("cat", ""))])
    label = lambda k: (f"GPU {k[1]} stream {k[2]}" if k[0] == 0 else f"CPU {k[1]} thread {k[2]}")  # noqa: E731
    ordered = sorted(rows, key=lambda k: (k[0], str(k[1]), int(k[2]) if str(k[2]).isdigit() else 0, str(k[2])))
    for k in ordered:
        _depths(rows[k])
    return {"span_us": hi - lo, "rows": {label(k): sorted(rows[k]) for k in ordered}, "shown": len(shown),
            "of": len(inside)}


def read(trace_path) -> dict:
    """The whole trace's views, for the page."""
    trace = read_trace(trace_path)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = max(1, sum(1 for e in events if str(e.get("name", "")).startswith(STEP)))
    return {"breakdown": breakdown(events), **gpu_figures(events), "memory": memory_curve(trace),
            "gpu": any(e.get("cat") in GPU_CATS for e in events), "ops": op_table(events, steps),
            "kernels": kernel_table(events, steps), "overlap": overlap(events), "timeline": timeline(events),
            "steps": steps}
