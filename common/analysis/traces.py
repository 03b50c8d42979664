"""Reading a profiler trace (Chrome trace JSON, gzipped or not) without torch: its complete events,
kept to the profiled steps, and which op encloses which event on a thread."""
import gzip
import json
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")  # cudaLaunchKernel, and cuLaunchKernel (Triton, Inductor, cuBLASLt)


def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def union_length(intervals) -> float:
    return sum(e - s for s, e in union(intervals))


_last: tuple | None = None  # (which file, as it was; its JSON): the last trace read


def read_trace(trace_path) -> dict:
    """A trace's JSON (gzipped too). The last one read is kept while its file is unchanged: a run's
    evidence, roofline, settings and page each read the same trace (a parse of seconds for a large
    one). Callers read what it returns and never change it."""
    global _last
    path = Path(trace_path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if _last is not None and _last[0] == key:
        return _last[1]
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
    else:
        trace = json.loads(path.read_text())
    _last = (key, trace)
    return trace


def profiled(trace_path) -> tuple[list[dict], int]:
    """(the complete events inside the profiled steps, GPU work included wherever it ran; how many
    steps). A trace without ProfilerStep ranges is taken whole, as one step."""
    events = [e for e in read_trace(trace_path)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if steps:
        bounds = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in steps)
        events = [e for e in events if any(a <= e["ts"] <= b for a, b in bounds) or e.get("cat") in GPU_CATS]
    return events, max(len(steps), 1)


def enclosing(events, want=lambda e: True) -> dict[int, list[dict]]:
    """For each event on a CPU thread (by id()), the ops open around it, outermost first (ops
    included: an op's own list ends with itself). `want(op)` picks the ops that count."""
    by_thread = {}
    for e in events:
        if e.get("cat") == "cpu_op" or e.get("cat") in LAUNCH_CATS:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    found = {}
    for items in by_thread.values():
        stack = []
        for e in sorted(items, key=lambda e: (e["ts"], -e.get("dur", 0))):
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < e["ts"]:
                stack.pop()
            if e.get("cat") == "cpu_op" and want(e):
                stack.append(e)
                found[id(e)] = list(stack)
            else:
                found[id(e)] = list(stack)
    return found
