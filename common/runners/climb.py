"""`make ladder`: every rung of each workload's ladder, then reports/ladder_<workload>.md.

    python -m common.runners.climb [churn|resnet18 ...] [--smoke] [--rounds N] [--device ...] [--data synthetic]

Each rung runs in its own process, pinned to the same cores; a round climbs the ladder and the next
one climbs down, so drift hits every rung alike. Speedups are throughput ratios (samples/s), since
a rung may change the batch size: cumulative against rung 0, incremental against the rung below,
the latter with its 95% interval over processes. Parity: every rung against rung 0, within the
tolerance of the techniques it has added. Every input (flags, --data paths, the flags after -- as the
ladder scripts read them, the reports folder) is checked before the first run.
"""
import argparse
import sys
from pathlib import Path

import ladder
from common import env
from common.analysis import metrics, stats
from common.analysis.aggregate import aggregate, parity, parity_failure
from common.analysis.metrics import fmt
from common.analysis.results import LadderSummary, Rung, atomic_write_bytes, atomic_write_text, write_result
from common.cli import OneLineParser, check_script_flags, split_passthrough
from common.errors import CookbookError, exit_with
from common.presets import WORKLOADS
from common.render import plots
from common.runners import launch

# the issues' targets on an H100-class GPU, checked in the report (never on CPU)
TARGETS = {
    "churn": "the last rung's p99 at most 2x its median, at least 10x the naive throughput, and the compiled "
             "graph's median within 1.2x of the hand-captured graph's",
    "resnet18": "the last rung at least 18,000 images/s at 224 px and at least 36x the naive throughput",
}


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.climb", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"which ladders (default: {' '.join(ladder.LADDERS)})")
    launch.add_flags(p, rounds_help="rounds over the ladder (default 2: an interval from the fewest processes that "
                                    "give one, to keep make ladder within about 12 minutes on an H100; 1 with --smoke)")
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    args.workloads = list(dict.fromkeys(args.workloads))  # each ladder once
    unknown = [w for w in args.workloads if w not in ladder.LADDERS]
    if unknown:
        raise CookbookError(f"no ladder for {', '.join(unknown)}; choose from {', '.join(ladder.LADDERS)}")
    return args


def rounds_of(args) -> int:
    return args.rounds or (1 if args.smoke else 2)


def climb(workload, args, cuda, cpus, results_dir, reports_dir, command, counter=None) -> LadderSummary:
    """Every rung of one ladder, `rounds_of(args)` times; counter: the progress over every ladder of the run."""
    spec = ladder.spec(workload)
    mode = "smoke" if args.smoke else "cuda" if cuda else "cpu"
    rounds = rounds_of(args)
    flags = ["--device", args.device] + (["--smoke"] if args.smoke else [])
    flags += launch.data_flags(args.data, [workload])[workload] + args.script_args
    out_dir = results_dir / workload
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = Path(reports_dir) / "traces" / "ladder" / workload
    counter = counter or launch.Counter({workload: (rounds * len(spec.rungs),) * 2})

    def run_one(i, round_no):
        rung_flags = ["--rung", str(i), "--trace-dir", str(traces / f"rung{i}"), *flags,
                      *spec.rungs[i].flags.get(mode, [])]
        if round_no > 1:
            rung_flags += ["--profile-steps", "0", "--probe-steps", "0"]  # evidence and parity: round 1
        return launch.child(["-m", spec.script], rung_flags, out_dir / f"rung{i}_r{round_no}.json", cpus=cpus,
                             rerun="make ladder")

    done = launch.rounds(range(len(spec.rungs)), run_one, rounds, counter, workload,
                         lambda i, n: f"{workload} rung {i} ({spec.rungs[i].name}) round {n}")
    runs, failures = done.runs, [outcome.failure(f"rung {i}", n) for i, n, outcome in done.failures]
    return summarize(workload, runs, failures, rounds, mode, command, cpus)


def per_sample_ms(agg) -> list[float]:
    """Per-process time per sample: a throughput that stays comparable when the batch changes."""
    return [m / agg.config.batch_size for m in agg.process_medians_ms]


def summarize(workload, runs, failures, rounds, mode, command, cpus=()) -> LadderSummary:
    spec = ladder.spec(workload)
    base = aggregate(runs[0]) if 0 in runs else None
    table, below = [], None
    for i, rs in enumerate(spec.rungs):
        rung = Rung(index=i, id=rs.id, name=rs.name, adds=rs.adds, status="failed")
        agg = aggregate(runs[i]) if i in runs else None
        if agg is not None:
            rung.status, rung.aggregate = agg.status, agg
        if agg is not None and agg.status == "ok":
            if base is not None and base.status == "ok":
                rung.cumulative = agg.throughput_per_s / base.throughput_per_s
                rung.parity = parity(runs[0][0], runs[i][0], {"what": "training loss", **rs.parity}) if i else None
            if below is not None and below.status == "ok":  # the rung below, as the docstring says
                rung.incremental = stats.speedup(per_sample_ms(below), per_sample_ms(agg))
        below = agg
        table.append(rung)
    return LadderSummary(workload=workload, what=spec.what, mode=mode, command=command, rungs=table,
                         failures=failures, rounds={"rounds": rounds, "cpus": list(cpus), "method": stats.METHOD})


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
        ratio = a.pooled.p99_ms / a.median_ms
        out.append(f"  - last rung: p99 {a.pooled.p99_ms:.3f} ms, median {a.median_ms:.3f} ms: p99/median {ratio:.2f}: "
                   + _met(ratio <= 2, "2 wanted"))
        by_id = {r.id: r for r in rows}
        if "cuda_graphs" in by_id and "hand_graph" in by_id:
            c, h = by_id["cuda_graphs"].aggregate.median_ms, by_id["hand_graph"].aggregate.median_ms
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
    """samples/s at the median of the per-process medians, with the 95% interval of their geometric mean."""
    interval = stats.level_interval([a.config.batch_size * 1000 / m for m in a.process_medians_ms])
    return f"{a.throughput_per_s:,.0f}" + (f" ({interval[0]:,.0f}-{interval[1]:,.0f})" if interval else "")


def _incremental(s) -> str:
    if s is None:
        return metrics.NONE
    text = f"{s.ratio:.2f}x"
    if s.low is not None:
        text += f" ({s.low:.2f}-{s.high:.2f})"
    marks = {"slower": " **slower**", "undecided": " (n.s.)", "no meaningful difference": " (same)"}
    return text + marks.get(s.verdict, "")


def render(summary: LadderSummary, reports_dir: Path) -> list[Path]:
    w = summary.workload
    rows = [r for r in summary.rungs if r.status == "ok"]
    e = rows[0].aggregate.env if rows else None
    src = (rows[0].aggregate.data_source or {}) if rows else {}
    lines = [f"# Ladder: {w}", "", f"{summary.what}. Generated by `{summary.command}`"
             + (f" on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}), torch {e.torch}" if e else "")
             + f"; {summary.rounds.get('rounds')} round(s), climbing up then down, every process pinned to cores "
               f"{env.cpu_ranges(summary.rounds.get('cpus') or [])}; data: {src.get('kind', '?')}. "
               "Every number below comes from that run.", ""]
    if rows:
        lines += [f"![throughput per rung](ladder_{w}.png)", ""]
    lines += _targets(summary) + [""]
    cols = [metrics.get(k) for k in ("median_ms", "p99_ms", "peak_mb", "syncs_per_step", "kernels_per_step", "tflops",
                                     "mfu")]
    lines += ["| rung | adds | batch | samples/s (95% CI) | " + " | ".join(m.column() for m in cols)
              + " | cumulative | incremental (95% CI) | parity |", "|---:|---|---:|---:|" + "---:|" * len(cols)
              + "---:|---:|---|"]
    for r in summary.rungs:
        if r.status != "ok":
            why = f"out of memory at batch {r.aggregate.oom.batch_size}" if r.status == "oom" else "failed"
            lines.append(f"| {r.index} | **{r.name}** (`{r.id}`): {r.adds} | | {why} |" + "|" * (len(cols) + 3))
            continue
        par = r.parity
        ptxt = ("reference" if par is None else ("ok" + ("" if par.windows_compared else " (first window only)"))
                if par.ok else "FAILED: " + parity_failure(par))
        a = r.aggregate
        lines.append(f"| {r.index} | **{r.name}** (`{r.id}`): {r.adds} | {a.config.batch_size} | {_throughput(a)} | "
                     + " | ".join(m.text(a) for m in cols)
                     + f" | {fmt(r.cumulative, '.2f')}{'' if r.cumulative is None else 'x'} | "
                     f"{_incremental(r.incremental)} | {ptxt} |")
    lines += ["", "Speedups are throughput ratios (samples/s at the median of the per-process medians); the "
                  f"incremental one is against the rung below, with a {stats.METHOD} on time per sample: '(n.s.)' "
                  "where it includes 1, **slower** where the rung lost speed. TFLOP/s from FlopCounterMode's count "
                  "of one step; MFU against this card's measured bf16 matmul ceiling "
                  "(`python -m common.measure.ceiling`). Parity compares each rung's first steps and windowed means "
                  "with rung 0's, within the tolerance of the techniques it adds (see `ladder/__init__.py`)."]
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
    atomic_write_text(md, "\n".join(lines))
    return written


def check(args) -> None:
    """What the ladders will be given, checked before any rung runs: the --data paths as their loaders
    read them, and the flags after -- as each ladder script's parser reads them."""
    launch.data_flags(args.data, WORKLOADS)
    launch.check_data(args.data, WORKLOADS)  # every path given
    if args.script_args:
        for w in args.workloads or list(ladder.LADDERS):
            spec = ladder.spec(w)
            check_script_flags(args.script_args, w, ladder.DEFAULTS, prog=f"python -m {spec.script}",
                               extend=ladder.rung_flag(w), reserved=("out", "trace_dir", "rung"))


def _why(w: str, summary: LadderSummary, r: Rung, logs: bool = True) -> str:
    """Which rung and why: its parity failure with by how much, or its failed rounds (and their logs)."""
    if r.parity and not r.parity.ok:
        return f"{w} rung {r.index} ({r.name}): parity FAILED: {parity_failure(r.parity)}"
    failed = [f for f in summary.failures if f.what == f"rung {r.index}"]
    return f"{w} rung {r.index} ({r.name}): " + ("; ".join(
        f"round {f.round} failed (exit {f.returncode}" + (f"; log {f.log})" if logs else ")") for f in failed)
        or "the run failed")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    cuda = launch.use_cuda(args.device)
    cpus = launch.cpu_set(args.cpus)
    check(args)
    reports_dir = Path(args.reports_dir)
    results_dir = launch.output_folder(reports_dir, "ladder")  # checked ...
    launch.make_folder(results_dir, reports_dir)  # ... and created once every input has passed
    launch.ensure_ceiling(cuda)
    command = "make ladder" if not argv else "python -m common.runners.climb " + " ".join(argv)
    workloads = args.workloads or list(ladder.LADDERS)
    counter = launch.Counter({w: (rounds_of(args) * len(ladder.spec(w).rungs),) * 2 for w in workloads})
    wrong, short = [], []
    for w in workloads:
        summary = climb(w, args, cuda, cpus, results_dir, reports_dir, command, counter)
        write_result(results_dir / f"{w}.json", summary)
        write_result(reports_dir / "results" / "ladder" / f"{w}.json", summary)  # the latest, for the index
        written = render(summary, reports_dir)
        print(f"report: {', '.join(map(str, written))}", flush=True)
        for r in summary.rungs:
            if r.status == "failed" or (r.parity and not r.parity.ok):
                wrong.append("ladder " + _why(w, summary, r))
                short.append(_why(w, summary, r, logs=False))
                print(wrong[-1], file=sys.stderr)
    if len(wrong) > 1:  # the last line says why, all of it (the logs are named above)
        print(f"ladder: exit status 1: {len(wrong)} rungs: " + "; ".join(short), file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.climb")
