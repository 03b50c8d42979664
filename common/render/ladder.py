"""The ladder's report: reports/ladder_<workload>.md and its plot, from a LadderSummary; on a GPU run the
issues' targets are checked in it."""
from pathlib import Path

from common import env
from common.analysis import coldstart, metrics, stats
from common.analysis.aggregate import parity_failure
from common.analysis.metrics import fmt
from common.analysis.results import LadderSummary, atomic_write_bytes
from common.render import page, plots

# the issues' targets on an H100-class GPU, checked in the report (never on CPU)
TARGETS = {
    "churn": "the last rung's p99 at most 2x its median, at least 10x the naive throughput, and the compiled "
             "graph's median within 1.2x of the hand-captured graph's",
    "resnet18": "the last rung at least 18,000 images/s at 224 px and at least 36x the naive throughput",
}


def _met(ok: bool, miss: str) -> str:
    return "met" if ok else f"missed ({miss})"


def _targets(summary: LadderSummary) -> list[str]:
    rows = [r for r in summary.rungs if r.status == "ok"]
    target = TARGETS[summary.workload]
    if not rows or summary.mode != "cuda":
        return [f"- Target (H100-class GPU): {target}. Not checked: this is not a GPU run."]
    last = rows[-1]
    a = last.aggregate
    out = [f"- Target (H100-class GPU): {target}."]
    if summary.workload == "churn":
        ratio = a.pooled.p99_ms / a.pooled.median_ms
        out.append(f"  - last rung: p99 {a.pooled.p99_ms:.3f} ms, median {a.pooled.median_ms:.3f} ms: p99/median "
                   f"{ratio:.2f}: "
                   + _met(ratio <= 2, "2 wanted"))
        by_id = {r.id: r for r in rows}
        if "cuda_graphs" in by_id and "hand_graph" in by_id:
            c, h = by_id["cuda_graphs"].aggregate.step_ms, by_id["hand_graph"].aggregate.step_ms
            out.append(f"  - compiled graph {c:.3f} ms vs hand-captured {h:.3f} ms: {c / h:.2f}x: "
                       + _met(c / h <= 1.2, "1.2x wanted"))
        need = 10
    else:
        ips = a.throughput_per_s
        out.append(f"  - last rung: {ips:,.0f} images/s: " + _met(ips >= 18_000, f"{18_000 / ips:.2f}x short"))
        need = 36
    if last.cumulative is not None:
        out.append(f"  - cumulative speedup {last.cumulative:.1f}x: "
                   + _met(last.cumulative >= need, f"{need}x wanted"))
    return out


def _plot(summary: LadderSummary) -> bytes:
    return plots.png(_figure(summary))


def _figure(summary: LadderSummary):
    """Throughput per rung on a log axis (samples/s below, the speedup over rung 0 above, in x), each
    bar labelled with its cumulative speedup."""
    plt = plots.pyplot()

    rows = [r for r in summary.rungs if r.status == "ok"][::-1]  # rung 0 at the top
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(rows) + 2.0), layout="constrained")
    values = [r.aggregate.throughput_per_s for r in rows]
    ax.barh([f"{r.index}. {r.name}" for r in rows], values, color="#2a7ab9", height=0.6)
    lo, hi = min(values) / 2, max(values) * 2.5  # room on the right for the labels
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    plots.count_axis(ax.xaxis, log=True)
    for y, r in enumerate(rows):
        if r.cumulative:
            ax.text(values[y] * 1.06, y, f"{r.cumulative:.1f}x", va="center", fontsize=8)
    ax.set_xlabel("samples per second (log scale); bar labels: cumulative speedup over rung 0")
    base = next((r.aggregate.throughput_per_s for r in rows if r.index == 0), None)
    if base:
        top = ax.secondary_xaxis("top", functions=(lambda x: x / base, lambda x: x * base))
        plots.speedup_ticks(top.xaxis, lo / base, hi / base)
        top.set_xlabel("speedup over rung 0", fontsize=9)
    e = rows[-1].aggregate.env if rows else None
    fig.suptitle(plots.wrap(f"ladder {summary.workload}: {env.describe_device(e) if e else ''}", 100), fontsize=10)
    return fig


def _throughput(a) -> str:
    """samples/s at the variant's figure (the median of the per-process ms per step), with the 95% interval of
    the per-process throughputs' geometric mean."""
    interval = stats.level_interval([a.config.batch_size * 1000 / m for m in a.process_ms])
    return f"{a.throughput_per_s:,.0f}" + (f" ({interval[0]:,.0f}-{interval[1]:,.0f})" if interval else "")


def _incremental(s) -> str:
    if s is None:
        return metrics.NONE
    text = f"{s.ratio:.2f}x"
    if s.low is not None:
        text += f" ({s.low:.2f}-{s.high:.2f})"
    marks = {"slower": " **slower**", "undecided": " (n.s.)", "no meaningful difference": " (same)"}
    return text + marks.get(s.verdict, "")


def _roof(a) -> str:
    """'4.79 of 24.41 ms (20%)': the modelled ops at their roofline against their time, per step."""
    r = a.evidence.roofline if a.evidence else None
    if r is None or not r.roof_ms or not r.modelled_ms:
        return metrics.NONE
    return f"{r.roof_ms:.3g} of {r.modelled_ms:.3g} ms ({r.roof_ms / r.modelled_ms:.0%})"


def render(summary: LadderSummary, reports_dir: Path) -> list[Path]:
    """reports/ladder_<workload>.md, and its plot where a rung finished; the files written."""
    w = summary.workload
    rows = [r for r in summary.rungs if r.status == "ok"]
    e = rows[0].aggregate.env if rows else None
    src = rows[0].aggregate.data_source if rows else None
    lines = [f"# Ladder: {w}", "", f"{summary.what}. Generated by `{summary.command}`"
             + (f" on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}), torch {e.torch}" if e else "")
             + f"; {summary.rounds.rounds} round(s), climbing up then down, every process pinned to cores "
               f"{env.cpu_ranges(summary.rounds.cpus)}; data: {src.kind if src else '?'}. "
               "Every number below comes from that run.", ""]
    if rows:
        lines += [f"![throughput per rung](ladder_{w}.png)", ""]
    lines += _targets(summary) + [""]
    cols = [metrics.get(k) for k in ("step_ms", "p99_ms", "peak_mb", "syncs_per_step", "kernels_per_step", "tflops",
                                     "mfu")]
    lines += ["| rung | adds | batch | samples/s (95% interval) | " + " | ".join(m.column() for m in cols)
              + " | at the roofline | cumulative | incremental (95% interval) | parity |",
              "|---:|---|---:|---:|" + "---:|" * len(cols) + "---:|---:|---:|---|"]
    for r in summary.rungs:
        if r.status != "ok":
            why = (f"out of memory at batch {r.aggregate.oom.batch_size}" if r.status == "oom"
                   else f"skipped: {r.skipped}" if r.status == "skipped" else "failed")
            lines.append(f"| {r.index} | **{r.name}** (`{r.id}`): {r.adds} | | {why} |" + "|" * (len(cols) + 4))
            continue
        par = r.parity
        ptxt = ("reference" if par is None else ("ok" + ("" if par.windows_compared else " (first window only)"))
                if par.ok else "FAILED: " + parity_failure(par))
        a = r.aggregate
        lines.append(f"| {r.index} | **{r.name}** (`{r.id}`): {r.adds} | {a.config.batch_size} | {_throughput(a)} | "
                     + " | ".join(m.text(a) for m in cols) + f" | {_roof(a)}"
                     + f" | {fmt(r.cumulative, '.2f')}{'' if r.cumulative is None else 'x'} | "
                     f"{_incremental(r.incremental)} | {ptxt} |")
    lines += ["", "Speedups are throughput ratios (samples/s at the median of the per-process figures, each the timed "
                  "stretch's time over its steps); the "
                  f"incremental one is against the rung below, with a {stats.METHOD} on time per sample: '(n.s.)' "
                  "where it includes 1, **slower** where the rung lost speed. TFLOP/s from FlopCounterMode's count "
                  "of one step; MFU against this card's measured bf16 matmul ceiling "
                  "(`python -m common.measure.ceiling`). At the roofline: the time the rung's modelled ops would take "
                  "at this machine's measured ceilings (compute per dtype, memory bandwidth) against the time they "
                  "take, per profiled step, and that share: how close each rung gets to the limit. Parity compares "
                  "each rung's first steps and windowed means with rung 0's, within the tolerance of the techniques "
                  "it adds (see `ladder/__init__.py`)."]
    for r in rows:
        if r.break_even:
            said = coldstart.words(r.break_even, f"rung {r.index}", "the rung below",
                                   "a run of {n} steps like each rung's here")
            lines += ["", f"Compilation (rung {r.index}, {r.name}, against the rung below): {said}."]
    if e and e.device_type != "cuda":
        lines.append("This is a CPU run: it checks that every rung works and keeps parity; it is not a GPU result.")
    for f in summary.failures:
        lines += ["", f"{f.what.capitalize()} round {f.round} failed (exit {f.returncode}):", "", "```", *f.tail, "```"]
    lines.append("")
    md, png = Path(reports_dir) / f"ladder_{w}.md", Path(reports_dir) / f"ladder_{w}.png"
    written = [md]
    if rows:
        atomic_write_bytes(png, _plot(summary))
        written.append(png)
    page.write(md, "\n".join(lines))
    return written
