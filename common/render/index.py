"""reports/README.md: one row per recipe and workload from each recipe's latest comparison, and an
overview plot (reports/overview.png). Written after every `make recipe-<name>`; `make recipes`
runs them all. `python -m common.render.index` re-renders it from the saved results.

Every number comes from reports/results/<recipe>/comparison.json; nothing is typed in by hand.
"""
import sys
from dataclasses import dataclass
from pathlib import Path

from common import catalog, env
from common.analysis import goals, metrics, stats
from common.analysis.results import read_result
from common.analysis.results_compare import Comparison, LadderSummary
from common.analysis.results_sweep import SweepResult
from common.errors import CookbookError, exit_with
from common.files import atomic_write_bytes
from common.render import page, plots
from common.render.report import evidence_keys, verdict
from common.workload_specs import workload_names

HEADER = """# Reports

`make recipe-<name>` writes `<name>.md`, `<name>.png` and `<name>_<workload>_diff.html` here, and
regenerates this page from each recipe's latest run; `make recipes` runs them all. Reports
committed to the repository come only from real GPU runs, produced by `make`, never edited by hand.
`results/` (one JSON per run, with its log) and `traces/` (profiler traces) are generated and not
tracked.
"""


@dataclass
class Row:
    recipe: str
    workload: str = "?"
    device: str = "?"
    date: str = "?"
    smoke: bool = False
    speedup: object = None  # results.Speedup
    result: str = "failed"
    memory: str = ""
    mechanism: str = ""
    parity: str = ""
    goal: str = ""  # the H100 goal and whether it was met (common/analysis/goals.py)

    @property
    def cpu(self) -> bool:
        return self.device.startswith("CPU")


def latest(reports_dir: Path) -> dict:
    """recipe -> its latest comparison (or the one-line reason it cannot be read)."""
    found = {}
    for recipe in catalog.available():
        path = Path(reports_dir) / "results" / recipe / "comparison.json"
        if path.exists():
            try:
                found[recipe] = read_result(path, Comparison, f"make recipe-{recipe}")
            except (CookbookError, TypeError, KeyError) as e:
                found[recipe] = (f"unreadable results: re-run make recipe-{recipe} "
                                 f"({str(e).split(':')[0] if str(e) else 'old format'})")
    return found


def rows(comparisons: dict) -> list[Row]:
    out = []
    for recipe, c in comparisons.items():
        if isinstance(c, str):
            out.append(Row(recipe=recipe, result=c))
            continue
        for workload, entry in c.workloads.items():
            v = entry.slow or entry.fast
            row = Row(recipe=recipe, workload=workload, device=env.device_name(v.env if v else None),
                      date=v.env.date[:10] if v else "?", smoke=c.smoke)
            _, goal = goals.for_run(recipe, workload, entry)
            goal = goal or (goals.goal_of(recipe, workload) if row.cpu else {})  # a CPU run: the H100's, not judged
            row.goal = f"{goals.describe(goal)}: {goals.judge(goal, entry)}" if goal else ""
            ooms = [name for name in ("slow", "fast") if getattr(entry, name) and getattr(entry, name).status == "oom"]
            if ooms:
                row.result = " and ".join(ooms) + " ran out of memory"
            if entry.speedup:
                slow, fast = entry.slow, entry.fast
                row.speedup, row.result = entry.speedup, verdict(entry)
                row.parity = "ok" if entry.parity.ok else "FAILED"
                a, b = slow.memory.peak_mb, fast.memory.peak_mb
                row.memory = f"{(b / a - 1) * 100:+.0f}%" if a else "n/a"
                key = next(iter(evidence_keys(slow, c.evidence_keys)), None)  # memory has its own column
                if key:
                    m = metrics.get(key)
                    row.mechanism = f"{m.title(slow.env.device_type != 'cuda')}: {m.text(slow)} -> {m.text(fast)}"
            out.append(row)
    return out


def _plot(table) -> bytes:
    return plots.png(_figure(table))


def _figure(table):
    """Every recipe's speedup as a bar from 1x on a log axis (0.5x, 1x, 2x), its interval clipped to
    the axis, the number itself on the right."""
    plt = plots.pyplot()

    shown = [r for r in table if r.speedup][::-1]  # top to bottom in the table's order
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(shown) + 2.2), layout="constrained")
    speedups = [r.speedup for r in shown]
    clipped = plots.speedup_bars(ax, speedups, [f"{r.recipe} / {r.workload}" + (" (CPU)" if r.cpu else "")
                                                   for r in shown])
    ax.set_xlabel("speedup of the fast twin, with its 95% interval over processes")
    fig.legend(handles=plots.verdict_handles([s.verdict for s in speedups], clipped, "x"),
               loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    fig.suptitle(plots.wrap("Every recipe, slow vs fast: " + ", ".join(sorted({r.device for r in shown})), 100),
                 fontsize=10)
    return fig


def _beyond_recipes(reports_dir: Path) -> list[str]:
    """Links to the diagnoses and ladders present, with their headline from the saved results."""
    out = []
    for w in workload_names():
        md = reports_dir / f"baseline_{w}.md"
        if md.exists():
            verdict = next((line.strip("*.") for line in md.read_text().splitlines() if line.startswith("**")), "")
            out.append(f"- [Diagnosis of the {w} baseline](baseline_{w}.md): {verdict}")
    for w in workload_names():
        path = reports_dir / "results" / "ladder" / f"{w}.json"
        if (reports_dir / f"ladder_{w}.md").exists() and path.exists():
            try:
                rungs = [r for r in read_result(path, LadderSummary, "make ladder").rungs if r.status == "ok"]
                last = rungs[-1]
                head = (f"{len(rungs)} rungs; the last ({last.name}) {last.aggregate.throughput_per_s:,.0f} samples/s, "
                        f"{last.cumulative or 0:.1f}x the naive pipeline on {env.device_name(last.aggregate.env)}")
            except (CookbookError, IndexError, TypeError, KeyError):
                head = "unreadable results: re-run make ladder"
            out.append(f"- [Ladder: {w}](ladder_{w}.md): {head}")
    return (["## Baselines and ladders", ""] + out + [""]) if out else []


def _archives(reports_dir: Path) -> list[str]:
    """Earlier GPU runs kept unedited under reports/archive/<run>/, each with its ARCHIVE.md."""
    found = sorted(p.parent for p in (reports_dir / "archive").glob("*/ARCHIVE.md"))
    if not found:
        return []
    out = ["## Earlier GPU runs (older versions of the code)", ""]
    for folder in found:
        title = folder.joinpath("ARCHIVE.md").read_text().splitlines()[0].lstrip("# ")
        out.append(f"- [{folder.name}](archive/{folder.name}/ARCHIVE.md): {title}")
    return out + [""]


def _sweeps(reports_dir: Path) -> list[str]:
    """Links to the sweeps present, with the regime each found."""
    out = []
    for recipe in catalog.available():
        path = reports_dir / "results" / "sweep" / recipe / "sweep.json"
        if (reports_dir / f"sweep_{recipe}.md").exists() and path.exists():
            try:
                regime = read_result(path, SweepResult, f"make sweep-{recipe}").crossover
            except (CookbookError, TypeError, KeyError):
                regime = f"unreadable results: re-run make sweep-{recipe}"
            out.append(f"- [Sweep: {recipe}](sweep_{recipe}.md): {regime}")
    return (["## Regime maps (sweeps)", ""] + out + [""]) if out else []


def render(reports_dir: Path) -> list[Path]:
    reports_dir = Path(reports_dir)
    table = rows(latest(reports_dir))
    lines = [HEADER]
    if not table:
        lines += ["No recipe has been run here yet: `make recipes` (or `make recipe-<name>`) fills this page.", ""]
    else:
        note = "[^interval]" if any(r.speedup for r in table) else ""
        lines += [f"| recipe | workload | speedup{note} | memory | mechanism (slow -> fast) | parity | goal (H100) "
                  "| device | date |", "|---|---|---:|---:|---|---|---|---|---|"]
        for r in table:
            device = r.device + (", smoke" if r.smoke else "")
            lines.append(f"| [{r.recipe}]({r.recipe}.md) | {r.workload} | {r.result} | {r.memory} | "
                         f"{r.mechanism} | {r.parity} | {r.goal} | {device} | {r.date} |")
        lines.append("")
        if any(r.speedup for r in table):
            lines += ["![speedup of every recipe](overview.png)", ""]
        if any(r.cpu for r in table):
            lines += ["Rows marked CPU are CPU runs: they check the pipeline, they are not GPU results.", ""]
    lines += _beyond_recipes(reports_dir)
    lines += _sweeps(reports_dir)
    lines += _archives(reports_dir)
    if any(r.speedup for r in table):
        looks = max(r.speedup.looks for r in table if r.speedup)
        lines += [f"[^interval]: {stats.footnote(looks)}", ""]
    written = []
    if any(r.speedup for r in table):
        atomic_write_bytes(reports_dir / "overview.png", _plot(table))
        written.append(reports_dir / "overview.png")
    page.write(reports_dir / "README.md", "\n".join(lines))
    return [reports_dir / "README.md"] + written


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) > 1:
            raise CookbookError("usage: python -m common.render.index [REPORTS_DIR]")
        for p in render(Path(argv[0]) if argv else env.LOCAL_REPORTS):
            print(p)
    except CookbookError as e:
        exit_with(e, "common.render.index")


if __name__ == "__main__":
    main()
