"""A second, independent reader of every GPU trace: HolisticTraceAnalysis (`traceinsight` on PyPI,
imported as `hta`; optional at import time). After each profiled CUDA run it reads the trace and
returns its temporal breakdown (GPU idle share), its idle-time breakdown (host wait / kernel wait),
its kernel-launch statistics and the time the host spent blocked on a full launch queue; the
report shows its idle share beside ours and flags a disagreement.

A workaround, and why: HTA 0.6.1 rounds every timestamp to whole microseconds, ts up and ts + dur
down, so a GPU event shorter than 1 us that does not cross a microsecond boundary gets a duration
of -1 us. A torch trace with a few sub-microsecond memsets and no other non-compute events then
sums to a negative non-compute time and `get_temporal_breakdown` fails an assertion
(`non_compute_time >= 0`): that is what happened on the first H100 run's `amp_churn_slow` trace.
The fault is HTA's, not the trace's (the events are valid). We turn HTA's rounding off
(`HTAEnvOptions.set_disable_ns_rounding(True)`, the same as HTA_DISABLE_NS_ROUNDING=1), which also
stops it inflating idle time for microsecond-scale kernels.
"""
import contextlib
import io
import logging
import math
import warnings
from pathlib import Path

import torch

from common.analysis.results_run import HtaReading

FULL_QUEUE = 1024  # CUDA's launch queue: a host that fills it blocks in the next launch


def available() -> bool:
    try:
        import hta  # noqa: F401
    except ImportError:
        return False
    return True


def _unreadable(device: torch.device) -> str | None:
    """Why HTA has nothing to read here, or None."""
    if device.type != "cuda":
        return "HTA reads GPU traces: a CPU run has none for it to read"
    if not available():
        return "traceinsight (HolisticTraceAnalysis) is not installed: pip install traceinsight"
    return None


def read(trace_path: Path, device: torch.device) -> HtaReading:
    """HTA's reading of one trace; never raises (the run's own evidence stands)."""
    why = _unreadable(device)
    if why:
        return HtaReading(available=False, why=why)
    try:
        return _read(Path(trace_path))
    except Exception as e:  # HTA is a second opinion: its failure is reported, not fatal
        return HtaReading(available=False, why=f"HTA failed on this trace: {type(e).__name__}: {str(e)[:200]}")


@contextlib.contextmanager
def _quiet():
    """HTA without its rounding (see the module docstring), its prints, warnings and logs."""
    from hta.configs.env_options import HTAEnvOptions

    HTAEnvOptions.instance().set_disable_ns_rounding(True)
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        logging.getLogger("hta").setLevel(logging.ERROR)
        yield


def _read(path: Path) -> HtaReading:
    from hta.trace_analysis import TraceAnalysis

    with _quiet():
        ta = TraceAnalysis(trace_files={0: str(path)}, trace_dir="")
        trace = ta.t.get_trace(0)
        if not (trace["stream"] != -1).any():
            return HtaReading(available=False, why="no GPU events in the trace")
        temporal = ta.get_temporal_breakdown(visualize=False)
        idle = ta.get_idle_time_breakdown(visualize=False)[0]
        launches = ta.get_cuda_kernel_launch_stats(visualize=False).get(0)
        queue = ta.get_time_spent_blocked_on_full_queue(ta.get_queue_length_time_series(), max_queue_length=FULL_QUEUE)
    row = temporal.iloc[0]
    steps = _steps(ta)
    by_category = idle.groupby("idle_category")["idle_time"].sum()
    idle_total = float(by_category.sum()) or 1.0
    blocked_us = float(queue["duration_at_max_queue_length"].sum()) if queue is not None and len(queue) else 0.0
    out = HtaReading(
        available=True, version=_version(), steps=steps,
        idle_share=float(row["idle_time_pctg"]) / 100,
        compute_share=float(row["compute_time_pctg"]) / 100,
        non_compute_share=float(row["non_compute_time_pctg"]) / 100,
        idle_host_wait_share=float(by_category.get("host_wait", 0.0)) / idle_total,
        idle_kernel_wait_share=float(by_category.get("kernel_wait", 0.0)) / idle_total,
        blocked_on_full_queue_ms_per_step=blocked_us / 1000 / steps,
        note="HTA's microsecond rounding turned off (a known fault of HTA 0.6.1); HTA analyses all profiled "
             "steps but the last",
    )
    if launches is not None and len(launches):
        out.launches_per_step = len(launches) / steps
        out.launch_delay_us_median = float(launches["launch_delay"].median())
        out.launch_cpu_us_median = float(launches["cpu_duration"].median())
    return out


def _steps(ta) -> int:
    """The ProfilerSteps HTA analysed (it drops the last one from the trace it loads)."""
    trace = ta.t.get_trace(0)
    names = ta.t.symbol_table.get_sym_table()
    return max(1, sum(1 for i in trace["name"].unique() if str(names[i]).startswith("ProfilerStep#")))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("traceinsight")
    except Exception:
        return "?"


def comm_overlap(traces: dict[int, Path], device: torch.device) -> dict:
    """HTA's communication/computation overlap of a data-parallel run, per rank (the share of the
    communication kernels' time that overlaps computation), from every rank's trace; on a CPU run,
    or where HTA cannot read them, the reason instead."""
    why = _unreadable(device)
    if why:
        return {"why": why}
    try:
        from hta.trace_analysis import TraceAnalysis

        with _quiet():
            ta = TraceAnalysis(trace_files={r: str(p) for r, p in traces.items()}, trace_dir="")
            table = ta.get_comm_comp_overlap(visualize=False)
        found = {int(r): float(s) / 100 for r, s in zip(table["rank"], table["comp_comm_overlap_pctg"])
                 if math.isfinite(float(s))}  # NaN: a rank without communication kernels
        return {"per_rank": found} if found else {"why": "no communication kernels in the traces"}
    except Exception as e:  # a second opinion: its failure is reported, not fatal
        return {"why": f"HTA failed on these traces: {type(e).__name__}: {str(e)[:200]}"}
