"""The markdown report of a comparison: reports/<recipe>.md, a plot, side-by-side HTML diffs.

    python -m common.render.report amp     # re-render from reports/results/amp/comparison.json

Every number comes from the result files of a run, through common.analysis.metrics; nothing is typed in by hand.
"""
import os
import sys
from pathlib import Path

from common import catalog, env
from common.analysis import coldstart, figures, goals, metrics, stats
from common.analysis.aggregate import masks_words, parity_failure, skipped_words
from common.analysis.metrics import fmt
from common.analysis.results import read_result
from common.analysis.results_compare import BudgetSearch, Comparison, MemoryBudget, VariantAggregate, WorkloadComparison
from common.analysis.results_run import CompileStats, DataSource, Evidence
from common.errors import CookbookError, exit_with
from common.files import atomic_write_bytes, atomic_write_text
from common.render import diffs, page, plots, roofline

VIEW_TITLES = {  # the op tables of Evidence.views (results.OpViews), by field
    "device_time": "Top ops by self device time",
    "self_memory": "Top ops by self memory",
    "cpu_time": "Top ops by CPU time (incl. children)",
    "calls": "Top ops by call count",
}
VIEW_ROWS = 8
HTA_DISAGREE = 0.05  # our GPU idle share and HTA's may differ by 5 points before the report flags it
NOISY_ADVICE = (f"NOISY: the per-process figures spread by more than {stats.NOISY_CV:.0%} (CV between processes); "
                "re-run on an idle machine, or with more rounds (ARGS='--rounds 8')")


def view_title(view: str, cpu: bool) -> str:
    """An op table's title; a CPU run's device-time view holds self CPU time."""
    return "Top ops by self CPU time (CPU run: no device time)" if cpu and view == "device_time" else VIEW_TITLES[view]


def view_value(key, v) -> str:
    """One op's figure in the column its view is sorted by (times in us, memory in bytes, calls)."""
    if key.endswith("_us"):
        return f"{v / 1000:.3f} ms" if v >= 1000 else f"{v:.1f} us"
    if key == "self_mem_bytes":
        return f"{v / 2**20:.2f} MB"
    return f"{v:.1f}"


def _variants(entry: WorkloadComparison):
    return [(name, v) for name, v in (("slow", entry.slow), ("fast", entry.fast)) if v is not None]


def _first_env(comparison: Comparison):
    return next((v.env for e in comparison.workloads.values() for _, v in _variants(e)), None)


def device_label(comparison: Comparison) -> str:
    e = _first_env(comparison)
    return env.describe_device(e) if e else "no successful run"


def verdict(entry: WorkloadComparison, who: str | None = None) -> str:
    """The speedup in plain words with its interval (stats.describe), or why there is none."""
    return stats.describe(entry.speedup, who) if entry.speedup else "no speedup: a variant did not finish"


def noisy(v: VariantAggregate) -> bool:
    return stats.is_noisy(v.between_cv)


def busy(entry: WorkloadComparison) -> str | None:
    """Where other processes took CPU the twins' timed steps needed: the busiest twin's load in words."""
    loads = [v.load for _, v in _variants(entry) if v.load is not None and v.load.busy]
    return max(loads, key=lambda x: x.others_cores).words() if loads else None


def busy_lines(entry: WorkloadComparison) -> list[str]:
    words = busy(entry)
    return [f"> **The machine was busy**: {words} while the steps were timed, so these times are the machine's as "
            "much as the scripts' (rerun on an idle machine, or on cores nobody else uses with --cpus).", ""] \
        if words else []


def burst_words(v: VariantAggregate) -> str | None:
    """Where a variant's steps came in bursts: the first such process's pattern and cause, and in how
    many of its processes they did; None where none did."""
    found = [b for b in v.bursts if b is not None]
    if not found:
        return None
    return f"{found[0].words} ({len(found)} of {len(v.bursts)} processes)"


def rate_unit(comparison: Comparison) -> str:
    """samples/s, or the unit of the pairs' own samples where they all share one (a GPT's tokens/s)."""
    units = {v.config.rate for e in comparison.workloads.values() for _, v in _variants(e) if v.config}
    return units.pop() if len(units) == 1 else "samples/s"


def terminal_table(comparison: Comparison) -> str:
    cols = [metrics.get(k) for k in ("step_ms", "p95_ms", "between_cv", "within_cv", "throughput", "peak_mb",
                                     "syncs_per_step", "kernels_per_step")]
    head = f"{'workload':10} {'variant':7} {'ms/step':>10} {'p95 ms':>9} {'cv proc':>8} {'cv step':>8} " \
           f"{rate_unit(comparison):>11} {'peak MB':>9} {'syncs/st':>9} {'kern/st':>8}"
    lines = [f"{comparison.recipe} on {device_label(comparison)}", head, "-" * len(head)]
    widths = (10, 9, 8, 8, 11, 9, 9, 8)
    any_noisy = False
    for workload, entry in comparison.workloads.items():
        for variant in ("slow", "fast"):
            v = getattr(entry, variant)
            if v is None:
                lines.append(f"{workload:10} {variant:7} {'FAILED':>10}")
                continue
            if v.status == "oom":
                lines.append(f"{workload:10} {variant:7} out of memory at batch {v.oom.batch_size} ({v.oom.stage})")
                continue
            any_noisy |= noisy(v)
            lines.append(f"{workload:10} {variant:7} " + " ".join(f"{m.text(v):>{w}}" for m, w in zip(cols, widths))
                         + ("  NOISY" if noisy(v) else ""))
            lines += [f"{'':18} WARNING: {w}" for w in v.warnings]
            lines += [f"{'':18} bursts: {b}" for b in [burst_words(v)] if b]
        if words := busy(entry):
            lines.append(f"{'':18} BUSY MACHINE: {words} while the steps were timed")
        if entry.speedup:
            par = "ok" if entry.parity.ok else "FAILED"
            what = "" if entry.measure == "step" else f"{entry.measure}: "
            lines.append(f"{'':18} -> {what}{verdict(entry, 'fast')}; parity {par}; {entry.rounds_reason}")
        if entry.cold and entry.cold.first and entry.measure == "step":
            lines.append(f"{'':18} -> first step: {stats.describe(entry.cold.first, 'fast')}")
        if entry.cold and entry.cold.break_even:
            lines.append(f"{'':18} -> break-even: {coldstart.words(entry.cold.break_even)}")
    if any_noisy:
        lines.append(NOISY_ADVICE)
    return "\n".join(lines)


def _plot(comparison: Comparison) -> bytes:
    return plots.png(_figure(comparison))


def _figure(comparison: Comparison):
    """At the top, each workload's speedup on a log axis (0.5x, 1x, 2x) with its interval; below, per
    workload, each process's figure (dots: its ms per step) over the twins' figures (bars), the verdict as the
    caption in its colour; then peak memory."""
    plt = plots.pyplot()

    names = [w for w, e in comparison.workloads.items() if e.speedup]
    cols = max(len(names), 1)
    strip = 0.35 * len(names) + 1.0
    width = 4.4 * cols + 0.4
    fig = plt.figure(figsize=(width, 6.2 + strip), layout="constrained")
    grid = fig.add_gridspec(3, cols, height_ratios=[strip, 3.4, 2.8])
    top = fig.add_subplot(grid[0, :])
    speedups = [comparison.workloads[w].speedup for w in names][::-1]
    plots.speedup_bars(top, speedups, names[::-1])
    top.set_title("speedup of the fast twin, with its 95% interval over processes", fontsize=9)
    for i, w in enumerate(names):
        e = comparison.workloads[w]
        ax = fig.add_subplot(grid[1, i])
        for x, (name, v) in enumerate(_variants(e)):
            ax.scatter([x] * len(v.process_ms), v.process_ms,
                       color="#8c8c8c" if name == "slow" else "#2a7ab9", s=18, zorder=3)
            ax.bar([x], [v.step_ms], color="#d9d9d9" if name == "slow" else "#bcd6ea", width=0.6)
        ax.set_xticks([0, 1], ["slow", "fast"])
        ax.set_ylim(bottom=0)
        ax.set_title(f"{w}: {v.statistic} per process (dots)", fontsize=9)
        ax.set_ylabel("ms per step")
        ax.set_xlabel(plots.wrap(verdict(e, "fast"), 60), fontsize=8,
                      color=plots.TEXT_COLORS.get(e.speedup.verdict, "black"))
        ax = fig.add_subplot(grid[2, i])
        peaks = [v.memory.peak_mb for _, v in _variants(e)]
        ax.bar(["slow", "fast"], peaks, color=["#8c8c8c", "#2a7ab9"])
        ax.set_title(f"{w}: peak memory", fontsize=9)
        ax.set_ylabel(e.slow.memory.label())
        if peaks[0]:
            ax.set_xlabel(f"fast twin: {(peaks[1] / peaks[0] - 1) * 100:+.0f}% peak memory", fontsize=8)
    fig.suptitle(plots.wrap(f"{comparison.recipe}: {device_label(comparison)}", int(13 * width)), fontsize=10)
    return fig


def noise_floor(reports_dir: Path, e) -> str | None:
    """The latest A/A (compare --aa, which make gpu-check runs) on the device of stamp `e`, as a table
    cell: the interval one program gets against itself on this machine; None without one."""
    found = []
    for path in Path(reports_dir).glob("results/*/aa/comparison.json"):
        try:
            aa = read_result(path, Comparison)
        except CookbookError:  # another schema: not this version's calibration
            continue
        for workload, entry in aa.workloads.items():
            a = entry.slow.env if entry.slow else None
            if entry.speedup and a and (a.device_type, env.device_name(a)) == (e.device_type, env.device_name(e)):
                found.append((a, aa, workload, entry.speedup))
    if not found:
        return None
    a, aa, workload, s = max(found, key=lambda f: f[0].date)
    interval = f", 95% interval {s.low:.2f}-{s.high:.2f}" if s.low is not None else " (no interval)"
    return (f"{s.ratio:.2f}x{interval}: {aa.recipe}/{workload}'s slow script against itself, {s.processes[0]} "
            f"processes each{' (smoke sizes)' if aa.smoke else ''}, {a.date[:10]}, commit {a.git_commit}")


def _env_table(comparison: Comparison, reports_dir: Path | None = None):
    e = _first_env(comparison)
    if e is None:
        return ["No variant finished."]
    device = (f"{e.gpu_name} ({e.gpu_memory_gb} GB)" if e.device_type == "cuda"
              else f"CPU, {e.cpu} x{e.cpu_count}: a CPU run, not a GPU result")
    r = comparison.rounds
    rows = [("device", device), ("driver / CUDA / cuDNN", f"{e.driver} / {e.cuda} / {e.cudnn}"),
            *([("device profile", e.profile.summary())] if e.profile else []),
            ("TF32 matmul / cuDNN, float32 matmul precision, cudnn.benchmark",
             f"{e.tf32_matmul} / {e.tf32_cudnn}, {e.float32_matmul_precision}, {e.cudnn_benchmark}"),
            *_fast_settings(comparison, e),
            ("torch / torchvision / Python", f"{e.torch} / {e.torchvision} / {e.python}"),
            ("CPU", f"{e.cpu} x{e.cpu_count} (torch threads {e.torch_threads}); every run pinned to cores "
                    f"{env.cpu_ranges(e.cpu_set)}"),
            ("date (UTC) / commit", f"{e.date} / {e.git_commit}"),
            ("processes per variant", ("fixed: " if r.fixed else "") + f"{r.least}"
             + ("" if r.fixed else f" to {r.most}, added until the interval decides")
             + " (slow and fast alternate; who goes first alternates too)"),
            ("statistics", f"{r.method or stats.METHOD}; 'no meaningful difference' inside "
                           f"+-{stats.FLOOR if r.floor is None else r.floor:.0%}"),
            *([("noise floor here (A/A)", floor)] if reports_dir and (floor := noise_floor(reports_dir, e)) else []),
            ("mode", "smoke (tiny sizes)" if comparison.smoke else "full presets for this device"),
            ("command", f"`{comparison.command}`")]
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def _fast_settings(comparison: Comparison, e):
    """The fast twins' precision settings where they differ from the stamp above (precision sets them)."""
    fast = next((en.fast.env for en in comparison.workloads.values() if en.fast), None)
    if fast is None or (fast.tf32_matmul, fast.tf32_cudnn) == (e.tf32_matmul, e.tf32_cudnn):
        return []
    return [("... in the fast twins", f"{fast.tf32_matmul} / {fast.tf32_cudnn}, {fast.float32_matmul_precision}")]


def evidence_keys(slow: VariantAggregate, keys) -> list[str]:
    """The recipe's own evidence this run has, its point first (memory is said on its own)."""
    return [k for k in keys if k != "peak_mb" and metrics.get(k).value(slow) is not None]


def opening(entry: WorkloadComparison, keys=(), cpu=False) -> str:
    """A workload section's first sentence: the verdict in plain words, the memory change, the mechanism."""
    slow, fast = entry.slow, entry.fast
    said = verdict(entry, "fast")
    said = said if entry.measure == "step" else f"time to first step: {said}"
    parts = [f"**{said[0].upper() + said[1:]}**[^interval]"
             + ("; the recipe's README says when and why" if entry.speedup.verdict == "slower" else "")]
    a, b = slow.memory.peak_mb, fast.memory.peak_mb
    parts.append(f"peak memory {a:.0f} -> {b:.0f} MB ({(b / a - 1) * 100:+.1f}%)" if a else "peak memory n/a")
    for key in evidence_keys(slow, keys)[:1]:  # the point of the recipe
        m = metrics.get(key)
        change = m.change(slow, fast)
        parts.append(f"mechanism: {m.title(cpu)} {m.text(slow)} -> {m.text(fast)}" + (f" ({change})" if change else ""))
    return "; ".join(parts) + "."


HOST_BOUND_IDLE = 0.5  # a slow twin whose GPU idles this much of its steps is host-bound ...
DATA_BOUND = 0.3  # ... unless it waits this much of the step for data: then it is data-bound
# what cuts a host-bound step's host work, in the order the report names them (common.spec: host_fix)
HOST_FIXES = tuple(r for _, r in sorted((catalog.spec(r).host_fix, r) for r in catalog.available()
                                        if catalog.spec(r).host_fix is not None))


def host_bound(v: VariantAggregate) -> bool:
    idle = v.evidence.gpu_idle_share if v.evidence else None
    data = v.host.data_wait_share or 0.0
    return v.env.device_type == "cuda" and idle is not None and idle >= HOST_BOUND_IDLE and data < DATA_BOUND


def _host_bound(recipe: str, entry: WorkloadComparison) -> list[str]:
    """A host-bound step where the technique did not pay: say so first, with the evidence."""
    slow = entry.slow
    # the recipes that cut host work are the fix for a host-bound step, and the data pipeline is
    # judged by its data wait: for them an undecided result means something else
    if recipe in HOST_FIXES or recipe == "dataloader" or not host_bound(slow) or entry.speedup.verdict == "faster":
        return []
    ev = slow.evidence
    fixes = ", ".join(f"[`{r}`](../recipes/{r}/README.md)" for r in HOST_FIXES if r != recipe)
    return [f"- **Host-bound: this step cannot get faster from this technique here.** The GPU is idle "
            f"{ev.gpu_idle_share:.0%} of the slow twin's profiled steps, while the host spends "
            f"{slow.host.cpu_ms_per_step or 0:.2f} ms of CPU per step running {ev.ops_per_step:.0f} ops and "
            f"launching {ev.kernels_per_step:.0f} kernels. A technique that changes the GPU's work moves nothing "
            f"while the GPU waits for the host; what cuts host work does: {fixes}. The recipe's README says where "
            f"this one pays."]


def _budget_lines(b: MemoryBudget | None) -> list[str]:
    if not b:
        return []
    out = ["## Under a memory budget", ""]
    if b.note:
        return out + [f"Largest batch of {b.pair} under a {b.budget_gb:g} GB budget: {b.note}.", ""]
    slow, fast = b.slow or BudgetSearch(), b.fast or BudgetSearch()
    def fits(v):
        if v.fits is None:
            return "not even the first probe" if v.fails else "no answer (a probe failed)"
        return f"batch {v.fits}" + ("" if v.fails else " (the largest probed)")
    head = (f"Under a {b.budget_gb:g} GB budget (`--memory-budget-gb`), {b.pair} "
            f"**fits {fits(slow)} without checkpointing, {fits(fast)} with**")
    if slow.fits and fast.fits:
        head += f" ({fast.fits / slow.fits:.2f}x the batch)"
    out += [head + ".", ""]
    for name, v in (("without", slow), ("with", fast)):
        probes = ", ".join(f"{batch} {'ok' if kind == 'ok' else kind}" for batch, kind in v.probes)
        out.append(f"- {name}: probes {probes}")
    return out + ["", "Each probe trains a few steps at one batch size in its own process with the GPU's memory capped "
                      "(`torch.cuda.set_per_process_memory_fraction`); doubling until one runs out of memory, then "
                      "bisecting.", ""]


def _process_lines(entry: WorkloadComparison, cpu: bool):
    out = []
    for name, v in _variants(entry):
        out.append(f"- {name}: per-process {v.statistic}s "
                   f"{', '.join(f'{m:.3f}' for m in v.process_ms)} ms; "
                   f"CV between processes {fmt(v.between_cv, '.1%')}, of single steps within a process "
                   f"{v.within_cv:.1%} (median)" + (" - **noisy**" if noisy(v) else ""))
        if words := burst_words(v):
            out.append(f"  - **Steps in bursts** ({name}): {words}")
    if any(noisy(v) for _, v in _variants(entry)):
        out.append(f"- {NOISY_ADVICE}")
    return out


def hta_lines(traces: list[tuple[str, Evidence | None]], cpu: bool):
    """HTA's reading of the same traces beside ours, one line per (name, evidence); a disagreement of
    more than 5 points is flagged."""
    if cpu:
        return ["- Second opinion (HolisticTraceAnalysis): nothing to read: "
                "HTA reads GPU traces and this is a CPU run."]
    out = []
    for name, ev in traces:
        h = ev.hta if ev else None
        ours = ev.gpu_idle_share if ev else None
        if not (h and h.available):
            out.append(f"- HolisticTraceAnalysis ({name}): {(h.why if h else None) or 'no trace'}")
            continue
        theirs = h.idle_share
        flag = (ours is not None and theirs is not None and abs(ours - theirs) > HTA_DISAGREE)
        out.append(f"- HolisticTraceAnalysis ({name}): GPU idle {fmt(theirs, '.1%')} (ours {fmt(ours, '.1%')})"
                   + (f" - **they disagree by {abs(ours - theirs) * 100:.0f} points**: "
                      "see docs/measurement.md, 'Measurement integrity'" if flag else "")
                   + f"; host blocked on a full launch queue {fmt(h.blocked_on_full_queue_ms_per_step, '.3f')} "
                     f"ms/step; kernel launches per step {fmt(h.launches_per_step, '.0f')}"
                   + (f"; note: {h.note}" if h.note else ""))
    return out


def _nodes_words(ranks: list[dict]) -> str:
    """'node 0 on host-a (ranks 0-1, 2 x NVIDIA H100), node 1 on host-b (ranks 2-3, 2 x NVIDIA H100)'."""
    words = []
    for node in sorted({r["node"] for r in ranks}):
        mine = [i for i, r in enumerate(ranks) if r["node"] == node]
        devices = sorted({ranks[i]["device"] for i in mine})
        words.append(f"node {node} on {ranks[mine[0]]['host']} (ranks {mine[0]}-{mine[-1]}, "
                     f"{len(mine)} x {' and '.join(devices)})")
    return ", ".join(words)


def _ranks_lines(slow: VariantAggregate, fast: VariantAggregate) -> list[str]:
    """A data-parallel pair (common.distributed.settle): the ranks, their parameters, HTA's overlap per rank."""
    out = []
    for name, v in (("slow", slow), ("fast", fast)):
        d = v.extra.get("ddp")
        if not d or d.get("world_size", 1) < 2:
            continue
        overlap = d.get("comm_overlap") or {}
        per_rank = overlap.get("per_rank")
        said = (", ".join(f"rank {r} {s:.0%}" for r, s in per_rank.items()) if per_rank
                else overlap.get("why", "not read"))
        options = ("FSDP2 (fully_shard)" if d.get("sharded") else
                   ", ".join(f"{k}={x}" for k, x in (d.get("options") or {}).items()) or "DDP's defaults")
        same = "one consistent state, gathered whole on every rank" if d.get("sharded") else "identical on every rank"
        out.append(f"- Ranks ({name}): {d['world_size']} on {d['backend']}, {options}; parameters after the run "
                   + (same if d["distinct_digests"] == 1 else f"**{d['distinct_digests']} different sets**")
                   + f"; communication overlapped with computation (HTA): {said}")
        if len({r["node"] for r in d.get("ranks", [])}) > 1:
            out.append(f"  - Nodes ({name}): {_nodes_words(d['ranks'])}")
        if d.get("hook_ms_per_step") is not None and v.step_ms:
            out.append(f"  - The measurement's own cost ({name}): its all-reduces are counted by a Python comm hook "
                       f"(`common/distributed.py`) in place of DDP's built-in C++ one, the same arithmetic; the hook "
                       f"took {d['hook_us_per_call']:.0f} us of host time per call, {d['hook_ms_per_step']:.3f} ms "
                       f"per step ({d['hook_ms_per_step'] / v.step_ms:.1%} of a step), the all-reduce's "
                       "own launch included (an uncounted run is compared in tests/integration/test_ddp.py)")
    return out


def _workload_section(recipe, workload, entry: WorkloadComparison, reports_dir, keys=()):
    out = [f"## {workload}", ""]
    for name, v in _variants(entry):
        if v.status == "oom":
            out += [f"- **{name}: out of memory at batch {v.oom.batch_size}** ({v.oom.stage}): `{v.oom.message}`"]
    for name in ("slow", "fast"):
        if getattr(entry, name) is None:
            out += [f"- **{name}: failed**; see the failed runs below."]
    if entry.speedup is None:
        for name, v in _variants(entry):
            if v.status == "ok":
                out += [f"- {name} ran: {v.step_ms:.3f} ms per step, p95 {v.pooled.p95_ms:.3f} ms, "
                        f"{v.throughput_per_s:.1f} {v.config.rate}, {v.memory.peak_mb:.0f} MB"]
        out += ["", "No speedup: only one variant of the pair finished.", ""]
        return out + _diff_section(recipe, workload, reports_dir)
    slow, fast = entry.slow, entry.fast
    src = slow.data_source or DataSource(kind="?")
    cfg = slow.config
    cpu = slow.env.device_type != "cuda"
    size = f", {cfg.image_size} px crops" if cfg.image_size else ""
    out += busy_lines(entry)
    out += [opening(entry, keys, cpu), ""]
    out += _host_bound(recipe, entry)
    goal = goals.goal_line(recipe, workload, entry)
    out += [f"- {goal}"] if goal else []
    out += [f"- Processes: {entry.rounds_reason}"] if entry.rounds_reason else []
    for key in evidence_keys(slow, keys)[1:]:
        m = metrics.get(key)
        change = m.change(slow, fast)
        out.append(f"- Mechanism: {m.title(cpu)}: {m.text(slow)} (slow) -> {m.text(fast)} (fast)"
                   + (f", {change}" if change else ""))
    out += ["", f"Data: **{src.kind}**{' - ' + src.note if src.note else ''}. "
                f"Batch {cfg.batch_size}{size}; {slow.pooled.n} and {fast.pooled.n} timed steps over "
                f"{len(slow.process_ms)} and {len(fast.process_ms)} processes.", ""]
    cols = [metrics.get(k) for k in metrics.TABLE]
    out += ["| variant | " + " | ".join(slow.config.rate if m.name == "throughput" else m.column(cpu) for m in cols)
            + " |", "|---|" + "---:|" * len(cols)]
    for name, v in (("slow", slow), ("fast", fast)):
        out.append(f"| {name} | " + " | ".join(m.text(v) for m in cols) + " |")
    c = fast.compile or CompileStats()
    if c.graphs:
        skips = c.cudagraph_skips or 0
        out.append(f"- torch.compile (fast twin): {c.graphs} graph(s), {c.graph_breaks} graph break(s), "
                   f"{c.recompiles} recompilation(s)"
                   + (f", CUDA graphs skipped {skips} time(s) (`mode=\"reduce-overhead\"` fell back to plain kernels)"
                      if skips and not cpu else "")
                   + (f"; breaks: {'; '.join(c.break_reasons)}" if c.break_reasons else ""))
    out += _setup_lines(slow, fast, cpu)
    out += attention_lines(slow, fast)
    out += cold_lines(entry)
    out += [""] + _process_lines(entry, cpu)
    par = entry.parity
    if par.max_abs is not None and par.ok:
        out.append(f"- Parity of the {par.what} (passed): {par.answers_compared} answers ({par.steps} served batches "
                   f"of {par.batch_size} requests after the warm-up), each within {par.max_abs:.2g} of the slow "
                   f"twin's answer to the same request (tolerance {par.atol:.2g}); all finite")
    elif par.max_rel is not None:
        early = (f"the first {par.early_steps} losses within {par.early_max_rel:.2%} of each other (tolerance "
                 f"{par.early_rtol * 100:.4g}%)" if par.early_steps else
                 f"the fast twin's GradScaler skipped updates while fp16's loss scale calibrated (steps "
                 f"{skipped_words(par.skipped_steps)}), so single steps and the learning probe are not compared, "
                 "only windows" if par.early_skipped else
                 "single steps not compared (the twins' batches differ step by step)")
        out.append(f"- Parity of the {par.what} ({'passed' if par.ok else 'FAILED'}) over {par.steps} steps: "
                   f"{early}; {par.window}-step mean losses within {par.max_rel:.2%} of "
                   f"the initial loss (worst at steps {par.at_step}-{par.at_step + par.window - 1}; tolerance "
                   f"{par.rtol * 100:.4g}%{masks_words(par)})"
                   + (f"; on the learning probe ({par.probe_steps} steps on one batch, over which the slow twin's "
                      f"loss fell {par.probe_drop:.0%}) within {par.probe_max_rel:.2%} (tolerance "
                      f"{par.probe_rtol * 100:.4g}%)" if par.probe_max_rel is not None else "")
                   + "".join(f"; `{k}` {v} in both models" for k, v in (par.agreed or {}).items())
                   + f"; {'all finite' if par.finite else 'NOT FINITE'}")
    else:
        out.append(f"- Parity FAILED: {parity_failure(par)}")
    if cpu:
        out.append("- On CPU the sync column counts `aten::_local_scalar_dense` (`.item()` and the like) outside "
                   "`optimizer.step()` and the data loader, whose tensors stay on the CPU in a GPU run too.")
    out += hta_lines([("slow", slow.evidence), ("fast", fast.evidence)], cpu)
    out += _ranks_lines(slow, fast)
    notices = sorted(set(slow.notices) | set(fast.notices))
    out += [f"- Notice: {n}" for n in notices]
    out += [f"- **WARNING ({name})**: {w}" for name, v in (("slow", slow), ("fast", fast)) for w in v.warnings]
    out += [f"- GPU monitor ({name}): util {g.gpu_util_mean:.0f}% mean, SM clock {g.sm_clock_mhz[0]}-"
            f"{g.sm_clock_mhz[1]} MHz, max {g.temp_c_max} C, "
            f"{g.power_w_mean:.0f} W of {g.power_limit_w:.0f} W"
            for name, g in (("slow", slow.gpu_monitor), ("fast", fast.gpu_monitor)) if g and g.available]
    out.append("")
    out += _mechanism_table(slow, fast, keys, cpu)
    out += roofline.section([("slow", slow.evidence), ("fast", fast.evidence)])
    out += roofline.diff_section(slow.evidence, fast.evidence)
    if slow.evidence and fast.evidence:
        out += ["### Profiler evidence (per step, profiled steps of round 1)", ""]
        for view in VIEW_TITLES:
            vs, vf = getattr(slow.evidence.views, view), getattr(fast.evidence.views, view)
            title = view_title(view, cpu)
            out += [f"**{title}**", "", "| # | slow: op | slow | fast: op | fast |", "|---:|---|---:|---|---:|"]
            for i in range(min(VIEW_ROWS, max(len(vs.rows), len(vf.rows)))):
                a = vs.rows[i] if i < len(vs.rows) else None
                b = vf.rows[i] if i < len(vf.rows) else None
                cell = lambda r, k: (f"`{r.name[:48]}`", view_value(k, getattr(r, k))) if r else ("", "")  # noqa: E731
                (an, av), (bn, bv) = cell(a, vs.key), cell(b, vf.key)
                out.append(f"| {i + 1} | {an} | {av} | {bn} | {bv} |")
            out.append("")
    return out + _diff_section(recipe, workload, reports_dir)


def attention_lines(slow: VariantAggregate, fast: VariantAggregate) -> list[str]:
    """The attention each twin ran, as its trace shows it (common.analysis.attention), where either has one."""
    said = [(name, v.evidence.attention) for name, v in (("slow", slow), ("fast", fast))
            if v.evidence and v.evidence.attention]
    return [f"- Attention ({name}): {words}" for name, words in said]


def cold_lines(entry: WorkloadComparison) -> list[str]:
    """Where a twin compiled: each twin's time to first step, the steady steps, and the break-even."""
    c = entry.cold
    if c is None:
        return []
    start = ("from each process's start (a fresh interpreter: its imports included)" if c.fresh else
             "from each process's start (forked from a server that had imported torch: a fresh interpreter adds "
             "its imports)")
    first = (f"fast is {stats.describe(c.first)}" if c.first and entry.measure == "step" else
             "the headline above" if c.first else "n/a")
    steps = entry.steps or (entry.speedup if entry.measure == "step" else None)
    out = [f"- Cold start, {start} to the end of its first step: slow {coldstart.seconds(c.slow_first_s)}, fast "
           f"{coldstart.seconds(c.fast_first_s)} ({first}). One-time work beyond the steady steps (the warm-up's "
           f"wall time less its steps at the steady pace): slow {coldstart.seconds(c.slow_one_time_s)}, fast "
           f"{coldstart.seconds(c.fast_one_time_s)}."]
    if entry.measure != "step" and steps:
        out.append(f"- Steady steps: {stats.describe(steps, 'fast')}.")
    if c.break_even:
        out.append(f"- Break-even: {coldstart.words(c.break_even)}.")
    cache = c.cache or {}
    if cache.get("loaded"):
        anyway = cache.get("compiled_anyway")
        out.append(f"- Compiled artefacts (fast twin): {cache['bytes'] / 2**20:.1f} MiB loaded before "
                   "the first step in every process, saved by an earlier process (torch.compiler.save_cache_artifacts)"
                   + (f"; {anyway} graph(s) compiled anyway in the first (the cache lacked them)" if anyway else "")
                   + ".")
    elif cache:
        out.append(f"- Compiled artefacts (fast twin): loaded in {cache.get('loaded_in', 0)} of "
                   f"{cache.get('processes', 1)} process(es) ({cache.get('why')} in the first): its first step "
                   "compiled cold there.")
    hits = [(name, v.compile) for name, v in (("slow", entry.slow), ("fast", entry.fast))
            if v.compile and v.compile.cache_misses is not None]
    if hits:
        out.append("- Inductor's and AOTAutograd's on-disk caches while compiling: "
                   + "; ".join(f"{name} {k.cache_hits} hit(s), {k.cache_misses} miss(es)" for name, k in hits)
                   + " (a hit is compiled code found on disk: an earlier process's, or a loaded cache's).")
    return out


def _setup_lines(slow, fast, cpu):
    """One-time work timed before the loop (run.setup: a hand-captured CUDA graph), on the lines of
    torch.compile's figures: both are in the warm-up and first-step figures, where compilation is."""
    out = []
    for name, v in (("slow", slow), ("fast", fast)):
        for what, seconds in ((v.compile and v.compile.setup_s) or {}).items():
            capture = what == "graph capture"  # common.graphs.capture's
            out.append(f"- {what[0].upper() + what[1:]} ({name} twin): {seconds:.3f} s before the timed loop"
                       + ("" if not capture else " (nothing to capture on a CPU: the step ran eagerly)" if cpu else
                          " (its warm-up steps and the recording)")
                       + f"; counted in the warm-up ({fmt(metrics.get('warmup_s').value(v), '.2f')} s) and "
                         f"first-step ({fmt(metrics.get('first_step_s').value(v), '.2f')} s) figures, as "
                         "torch.compile's compilation is")
    return out


def _mechanism_table(slow, fast, keys, cpu):
    """Every piece of evidence both variants have, the recipe's own first."""
    names = list(keys) + [k for k in metrics.METRICS if k not in keys and k not in metrics.TABLE]
    # a row where both sides are empty or zero says nothing, unless it is this recipe's evidence
    rows = [k for k in names if metrics.get(k).value(slow) or metrics.get(k).value(fast)
            or ((k in keys or k == "syncs_per_step") and metrics.get(k).value(slow) is not None)]
    out = ["### Mechanism: what the technique moves", "", "| evidence | slow | fast | fast vs slow |",
           "|---|---:|---:|---:|"]
    for k in rows:
        m = metrics.get(k)
        name = f"**{m.title(cpu)}**" if k in keys else m.title(cpu)
        out.append(f"| {name} | {m.text(slow)} | {m.text(fast)} | {m.change(slow, fast)} |")
    return out + [""]


def _diff_section(recipe, workload, reports_dir):
    html_name = f"{recipe}_{workload}_diff.html"
    atomic_write_text(reports_dir / html_name, diffs.html(recipe, workload))
    return [f"### The diff ({diffs.changed_lines(recipe, workload)} changed lines; "
            f"[side by side]({html_name}), or `make diff-{recipe}`)", "",
            "```diff", diffs.unified(recipe, workload), "```", ""]


def not_applicable_markdown(comparison: Comparison) -> str:
    """The report of a recipe this device cannot run: what it lacks, and where the pair does apply."""
    recipe, p = comparison.recipe, comparison.profile
    return "\n".join([
        f"# {comparison.title} (`{recipe}`)", "",
        f"Generated by `make recipe-{recipe}`. **{comparison.not_applicable[0].upper()}"
        f"{comparison.not_applicable[1:]}**: the twins would run the same arithmetic here, so nothing was "
        "timed (a 1.00x would say nothing about the technique).", "",
        f"- Device profile: {p.summary() if p else '?'} (decided from the compute capability, "
        "`common/analysis/device.py`)",
        f"- What the technique needs, and where it pays: [recipes/{recipe}/README.md](../recipes/{recipe}/README.md)",
        f"- Command: `{comparison.command}`", ""])


def render_markdown(comparison: Comparison, reports_dir: Path) -> str:
    recipe = comparison.recipe
    if comparison.not_applicable:
        return not_applicable_markdown(comparison)
    lines = [f"# {comparison.title} (`{recipe}`)", "",
             f"Generated by `make recipe-{recipe}`; every number below comes from that run's result files "
             f"(`{env.shown_path(Path(reports_dir) / 'results' / recipe)}/`). "
             f"Device: **{device_label(comparison)}**.", ""]
    failed = [(w, e.parity) for w, e in comparison.workloads.items() if e.parity and not e.parity.ok]
    lines += [f"> **Parity FAILED for {w}**: {parity_failure(par)}. Its speed is no claim until its twins train "
              "alike: the figures below show by how much they do not." for w, par in failed]
    lines += [""] if failed else []
    lines += [f"![step time per process and memory]({recipe}.png)", ""]
    lines += ["How to read it: each workload's section opens with the verdict, the memory change and the mechanism; "
              "below them, the evidence. Each variant ran in several processes; its figure is the median of the "
              f"per-process figures, each {figure_words(comparison)}. Parity: both twins start from the same "
              "weights and see the same batches; each workload's rule is stated with its result. Timing: CUDA "
              "events (CPU: perf_counter) around each step, read after the loop; warm-up excluded and shown on its "
              "own, and where a DataLoader's workers ran ahead, untimed steps until its queue drained. Where and how "
              "it ran: the table at the end.", ""]
    for workload, entry in comparison.workloads.items():
        lines += _workload_section(recipe, workload, entry, reports_dir, comparison.evidence_keys)
    lines += _budget_lines(comparison.budget)
    lines += ["## Where and how it ran", ""] + _env_table(comparison, reports_dir) + [""]
    if comparison.failures:
        lines += ["## Failed runs", ""]
        for f in comparison.failures:
            lines += [f"- {f.what} round {f.round}: exit {f.returncode} ({f.log})", "", "```", *f.tail, "```", ""]
    lines += ["## Traces", "", f"Profiler traces (round 1) are in `reports/traces/{recipe}/<workload>_<variant>/`:", ""]
    for workload, said in trace_pages(comparison, reports_dir).items():
        lines.append(f"- {workload}, slow and fast side by side in one page that needs no network: {said}")
    for workload, entry in comparison.workloads.items():
        for name, v in _variants(entry):
            if v.evidence:
                page_of = f", its page `{env.shown_path(v.evidence.page)}`" if v.evidence.page else ""
                lines.append(f"- {workload} {name}: `{env.shown_path(v.evidence.trace)}`{page_of}")
            elif v.unread:  # a tour's child left it for make finalize, which reads it where it came back
                lines.append(f"- {workload} {name}: `{env.shown_path(v.unread.trace)}`, not read: "
                             + ("`make finalize` reads it into the evidence" if Path(v.unread.trace).exists()
                                else "it did not come back with the bundle"))
    for workload, entry in comparison.workloads.items():
        for name, v in _variants(entry):
            mem = v.evidence.memory if v.evidence else None
            if mem and mem.snapshot:
                lines.append(f"- {workload} {name}: CUDA memory snapshot over the profiled steps "
                             f"`{env.shown_path(mem.snapshot)}`; to view it: {mem.view_snapshot}")
            if mem and mem.timeline:
                lines.append(f"- {workload} {name}: memory timeline by category `{env.shown_path(mem.timeline)}`")
    lines += ["", "- TensorBoard: `make tensorboard`, then open http://127.0.0.1:6006/#pytorch_profiler",
              "- Perfetto: open https://ui.perfetto.dev and drop a `.pt.trace.json` file on it",
              f"- Nsight Systems (NVTX ranges per step and phase): `make nsys-{recipe}` where `nsys` is installed", "",
              figures.comment(figures.recipe_facts(comparison)), ""]  # what other pages quote (the doctor)
    looks = max((e.speedup.looks for e in comparison.workloads.values() if e.speedup), default=0)
    if looks:
        floor = comparison.rounds.floor or stats.FLOOR
        lines += [f"[^interval]: {stats.footnote(looks, floor, statistic(comparison))}", ""]
    return "\n".join(lines)


def statistic(comparison: Comparison) -> str:
    """What each process's figure is, as this comparison's results say: the mean step, or in results
    written before it was, the median step."""
    said = {v.statistic for e in comparison.workloads.values() for _, v in _variants(e)}
    return stats.MEDIAN if stats.MEDIAN in said else stats.MEAN


def figure_words(comparison: Comparison) -> str:
    return stats.STATISTIC_WORDS[statistic(comparison)]


def trace_pages(comparison: Comparison, reports_dir: Path) -> dict[str, str]:
    """Each pair's page of its two traces (common.render.trace_page), beside them: the link, or why none."""
    from common.render import trace_page

    out = {}
    for workload, entry in comparison.workloads.items():
        traces = [(name, Path(v.evidence.trace)) for name, v in _variants(entry) if v.evidence and v.evidence.trace]
        if len(traces) != 2 or not all(p.is_file() for _, p in traces):
            continue
        page_path = Path(reports_dir) / "traces" / comparison.recipe / f"{workload}.html"
        try:
            trace_page.write(traces, page_path, f"{comparison.recipe} / {workload}: slow vs fast")
        except (OSError, ValueError, KeyError) as e:  # an unreadable trace costs its page, not the report
            out[workload] = f"not written ({type(e).__name__}: {e})"
            continue
        out[workload] = f"[{page_path.name}]({os.path.relpath(page_path, Path(reports_dir))})"
    return out


def render(comparison: Comparison, reports_dir: Path) -> list[Path]:
    reports_dir = Path(reports_dir)
    recipe = comparison.recipe
    md_path, png_path = reports_dir / f"{recipe}.md", reports_dir / f"{recipe}.png"
    text = render_markdown(comparison, reports_dir)  # also writes the HTML diffs
    written = [md_path]
    if any(e.speedup for e in comparison.workloads.values()):
        atomic_write_bytes(png_path, _plot(comparison))
        written.append(png_path)
    page.write(md_path, text)  # last: the report appears only once everything it links exists
    return written + sorted(reports_dir.glob(f"{recipe}_*_diff.html"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 1:
            raise CookbookError("usage: python -m common.render.report RECIPE")
        catalog.check_stepped(argv[0], "re-rendering saved results (`make report-*`)")
        reports_dir = env.LOCAL_REPORTS
        path = reports_dir / "results" / argv[0] / "comparison.json"
        if not path.exists():
            raise CookbookError(f"no results for {argv[0]!r} in {path.parent}; run make recipe-{argv[0]} first")
        for p in render(read_result(path, Comparison, f"make recipe-{argv[0]}"), reports_dir):
            print(p)
    except CookbookError as e:
        exit_with(e, "common.render.report")


if __name__ == "__main__":
    main()
