"""`make sweep-<recipe>`: the regime map. A recipe's pair run across the knob that decides whether its
technique pays (batch size; DataLoader workers), with the speedup's interval at every point and the
crossover marked.

    python -m common.runners.sweep amp [--smoke] [--rounds N] [--values 16,32,64] [--device ...] [--data synthetic]

Each point is a small comparison: slow and fast alternating, each run in its own process, pinned
(common/launch.py), for a fixed number of rounds (default 3 on CUDA, 2 on a CPU), so every point has
an interval over processes. Writes reports/sweep_<recipe>.md and .png (speedup with its interval,
and peak memory, against the knob). Every input (each --values entry by the scripts' own rule for the
knob, each --data path, the flags after --, the reports folder) is checked before the first run.
"""
import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from common import catalog, env
from common.analysis import stats
from common.analysis.aggregate import aggregate, parity, parity_failure
from common.analysis.results import Point, SweepResult, atomic_write_bytes, atomic_write_text, write_result
from common.cli import OneLineParser, check_script_flags, check_value, split_passthrough
from common.errors import CookbookError, exit_with
from common.presets import WORKLOADS
from common.render import index, plots
from common.runners import launch


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.sweep", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    launch.add_flags(p, rounds_help="rounds per point (default 3 on CUDA, 2 on a CPU and with --smoke)")
    p.add_argument("--values", help="the knob's values, comma-separated (default: the recipe's SWEEP for this device)")
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    return args


def spec_of(recipe: str) -> dict:
    spec = getattr(catalog.settings(recipe), "SWEEP", None)
    if spec is None:
        have = catalog.swept()
        raise CookbookError(f"recipe {recipe!r} has no sweep; these do: {', '.join(have)}")
    return spec


def crossover(points: list[Point], knob: str) -> str:
    """Where the technique starts to pay: the smallest value from which every larger one is
    'faster' (with its interval excluding 1). Points where a twin ran out of memory are named."""
    oom = [p.value for p in points if any(v is not None and v.status == "oom" for v in (p.slow, p.fast))]
    text = _crossover(points, knob)
    return text + (f"; out of memory at {knob} {', '.join(map(str, sorted(oom)))}" if oom else "")


def _crossover(points: list[Point], knob: str) -> str:
    points = sorted(points, key=lambda p: p.value)
    measured = [p for p in points if p.speedup is not None]
    if not measured:
        return "no point of the sweep finished"
    faster = [p.speedup.verdict == "faster" for p in measured]
    if all(faster):
        return f"pays off over the whole range measured ({knob} {measured[0].value} to {measured[-1].value})"
    if not any(faster):
        slower = [p.value for p in measured if p.speedup.verdict == "slower"]
        return (f"does not pay off anywhere in the range measured ({knob} {measured[0].value} to {measured[-1].value})"
                + (f"; slower at {', '.join(map(str, slower))}" if slower else ""))
    last_not = max(i for i, f in enumerate(faster) if not f)
    if last_not == len(measured) - 1:
        at = [p.value for p, f in zip(measured, faster) if f]
        return f"pays off at {knob} {', '.join(map(str, at))} only, not at the largest measured"
    return f"pays off from {knob} {measured[last_not + 1].value} up (not at {measured[last_not].value})"


@dataclass
class SweepPlan:
    """Everything a sweep runs, checked from the command line before anything starts or is written."""
    recipe: str
    spec: dict
    cuda: bool
    mode: str
    values: list[int]
    rounds: int
    cpus: list
    out_dir: Path
    flags: list[str]
    reports_dir: Path


def knob_values(text: str | None, spec: dict, mode: str, recipe: str) -> list[int]:
    """--values, each by the scripts' own rule for the knob (--batch-size 1 or more, --workers 0 or
    more), or the recipe's values for this mode."""
    if not text:
        return spec["values"][mode]
    pair = spec["pair"]
    overrides = getattr(catalog.settings(recipe), "DEFAULTS", {})
    values = set()
    for part in text.split(","):
        try:
            values.add(check_value(spec["flag"], part.strip(), catalog.workload_of(pair), overrides, pair))
        except CookbookError as e:
            raise CookbookError(f"--values {text!r}: {part.strip()!r} is not a valid {spec['knob']} ({e}); give whole "
                                f"numbers separated by commas, e.g. {','.join(map(str, spec['values'][mode]))}") \
                from None
    return sorted(values)


def make_plan(argv) -> SweepPlan:
    args = parse_args(argv)
    recipe = catalog.check(args.recipe)
    spec = spec_of(recipe)
    cuda = launch.use_cuda(args.device)
    mode = "smoke" if args.smoke else "cuda" if cuda else "cpu"
    values = knob_values(args.values, spec, mode, recipe)
    rounds = args.rounds or (3 if cuda and not args.smoke else 2)
    pair = spec["pair"]
    workload = catalog.workload_of(pair)
    data = launch.data_flags(args.data, [workload])[workload]
    launch.check_data(args.data, WORKLOADS)  # every path given, read as its loader reads it
    cpus = launch.cpu_set(args.cpus)
    if args.script_args:
        knob = spec["flag"].lstrip("-").replace("-", "_")  # the sweep sets it: --values, not -- --batch-size
        check_script_flags(args.script_args, workload, getattr(catalog.settings(recipe), "DEFAULTS", {}), pair,
                           prog=f"python -m recipes.{recipe}.{pair}_slow",
                           reserved={"out": None, knob: "it is the sweep's knob: give its values with --values"})
    out_dir = launch.output_folder(args.reports_dir, "sweep", recipe)  # checked; created when the sweep starts
    flags = ["--device", args.device, "--profile-steps", "0"] + (["--smoke"] if args.smoke else [])
    return SweepPlan(recipe=recipe, spec=spec, cuda=cuda, mode=mode, values=values, rounds=rounds, cpus=cpus,
                     out_dir=out_dir, flags=flags + data + args.script_args, reports_dir=Path(args.reports_dir))


def run_sweep(argv) -> tuple[SweepResult, Path]:
    plan = make_plan(argv)
    recipe, spec, values, rounds, cpus, flags = plan.recipe, plan.spec, plan.values, plan.rounds, plan.cpus, plan.flags
    out_dir = launch.make_folder(plan.out_dir, plan.reports_dir)  # every input has passed: now the first write
    pair = spec["pair"]
    settings = catalog.settings(recipe)
    rule = catalog.parity_rule(recipe, pair)
    launch.ensure_ceiling(plan.cuda)
    total = len(values) * rounds * 2
    counter = launch.Counter({value: (rounds * 2,) * 2 for value in values})
    print(f"sweep {recipe}/{pair} over {spec['knob']} {values}: {rounds} round(s) per point, {total} runs, "
          f"cores {env.cpu_ranges(cpus)}; logs in {out_dir}", flush=True)
    points = []
    for value in values:
        point = Point(value=value)

        def run_one(variant, round_no, value=value):
            return launch.child(["-m", f"recipes.{recipe}.{pair}_{variant}"],
                                 flags + [spec["flag"], str(value)]
                                 + (["--probe-steps", "0"] if round_no > 1 else []),  # parity: round 1
                                 out_dir / f"{pair}_{variant}_{value}_r{round_no}.json", cpus=cpus,
                                 rerun=f"make sweep-{recipe}")

        done = launch.rounds(catalog.VARIANTS, run_one, rounds, counter, value,
                             lambda v, n, value=value: f"{spec['knob']} {value}: {v} round {n}")
        runs = done.runs
        point.failed = [f"{v} round {n}: exit {o.returncode} ({o.log})" for v, n, o in done.failures]
        point.slow = aggregate(runs["slow"]) if "slow" in runs else None
        point.fast = aggregate(runs["fast"]) if "fast" in runs else None
        if point.slow and point.fast and point.slow.status == point.fast.status == "ok":
            point.speedup = stats.speedup(point.slow.process_medians_ms, point.fast.process_medians_ms)
            checked = parity(runs["slow"][0], runs["fast"][0], rule)
            point.parity_ok = checked.ok
            point.parity_failure = "" if checked.ok else parity_failure(checked)
            print(f"    {spec['knob']} {value}: {stats.describe(point.speedup)}", flush=True)
        points.append(point)
    result = SweepResult(recipe=recipe, title=settings.TITLE, pair=pair, knob=spec["knob"], flag=spec["flag"],
                         mode=plan.mode, rounds=rounds, points=points,
                         command="make sweep-" + recipe if not argv[1:]
                         else "python -m common.runners.sweep " + " ".join(argv))
    result.crossover = crossover(points, spec["knob"])
    write_result(out_dir / "sweep.json", result)
    write_result(plan.reports_dir / "results" / "sweep" / recipe / "sweep.json", result)  # the latest
    return result, plan.reports_dir


def _stamp(r: SweepResult):
    """The environment of the first run that finished, for the titles."""
    return next((getattr(p, v).env for p in r.points for v in ("slow", "fast") if getattr(p, v)), None)


def _plot(r: SweepResult) -> bytes:
    return plots.png(_figure(r))


def _figure(r: SweepResult):
    """Left: the speedup at each point on a log axis (0.5x, 1x, 2x), its interval clipped to the axis;
    right: peak memory of each twin. Both against the knob, labelled with its plain values."""
    plt = plots.pyplot()

    fig, (ax, mem) = plt.subplots(1, 2, figsize=(10.5, 4.4), layout="constrained")
    shown = [p for p in r.points if p.speedup is not None]
    xs = [p.value for p in shown]
    plots.speedup_axis(ax, [p.speedup.ratio for p in shown], "y")
    clipped = plots.speedup_intervals(ax, xs, [p.speedup for p in shown], "y")
    ax.scatter(xs, [p.speedup.ratio for p in shown], s=36, zorder=5,
               c=[plots.VERDICT_COLORS.get(p.speedup.verdict, "#a0a0a0") for p in shown])
    plots.knob_axis(ax, [p.value for p in r.points], "x")
    ax.set_xlabel(r.knob)
    ax.set_ylabel("speedup of the fast twin (95% CI over processes)", fontsize=9)
    ax.set_title(plots.wrap(f"regime: {r.crossover}", 70), fontsize=9)
    ax.legend(handles=plots.verdict_handles([p.speedup.verdict for p in shown], clipped), fontsize=8)
    for name, color in (("slow", "#8c8c8c"), ("fast", "#2a7ab9")):
        pts = [(p.value, getattr(p, name).memory.peak_mb) for p in r.points
               if getattr(p, name) is not None and getattr(p, name).status == "ok"]
        if pts:
            mem.plot(*zip(*pts), "o-", color=color, label=name)
        ooms = [p.value for p in r.points if getattr(p, name) is not None and getattr(p, name).status == "oom"]
        for i, x in enumerate(ooms):
            mem.axvline(x, color=color, ls=":", lw=1, label=f"{name}: out of memory" if i == 0 else None)
    plots.knob_axis(mem, [p.value for p in r.points], "x")
    mem.set_xlabel(r.knob)
    mem.set_ylabel("peak memory, MB")
    mem.set_title("peak memory of each twin", fontsize=9)
    mem.legend(fontsize=8)
    e = _stamp(r)
    fig.suptitle(plots.wrap(f"sweep {r.recipe}/{r.pair}: {env.describe_device(e) if e else ''}", 130), fontsize=10)
    return fig


def render(r: SweepResult, reports_dir: Path) -> list[Path]:
    e = _stamp(r)
    lines = [f"# Sweep: {r.title} (`{r.recipe}`, {r.pair}) across {r.knob}", "",
             f"Generated by `{r.command}`" + (f" on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}), "
                                              f"torch {e.torch}" if e else "")
             + f"; {r.rounds} round(s) per point, slow and fast alternating, each run in its own process. Every "
               "number below comes from that run.", "",
             f"**Regime: {r.crossover}.**", "", f"![speedup and memory against {r.knob}](sweep_{r.recipe}.png)", "",
             f"| {r.knob} | slow median ms | fast median ms | speedup (95% CI over processes) | verdict | slow peak MB "
             "| fast peak MB | parity |", "|---:|---:|---:|---|---|---:|---:|---|"]
    for p in r.points:
        cell = lambda v: ("out of memory" if v.status == "oom" else f"{v.median_ms:.3f}") if v else "failed"  # noqa: E731
        mem = lambda v: f"{v.memory.peak_mb:.0f}" if v and v.status == "ok" else ""  # noqa: E731
        s = p.speedup
        ci = "" if s is None else (f"{s.ratio:.2f}x" + (f" ({s.low:.2f}-{s.high:.2f})" if s.low is not None else ""))
        lines.append(f"| {p.value} | {cell(p.slow)} | {cell(p.fast)} | {ci} | {s.verdict if s else ''} | "
                     f"{mem(p.slow)} | {mem(p.fast)} | "
                     f"{'' if p.parity_ok is None else 'ok' if p.parity_ok else 'FAILED'} |")
    for p in r.points:
        lines += [f"- {r.knob} {p.value}: {f}" for f in p.failed]
        if p.parity_failure:
            lines.append(f"- {r.knob} {p.value}: parity FAILED: {p.parity_failure}")
    if e and e.device_type != "cuda":
        lines += ["", "This is a CPU run: it checks that the sweep works; it is not a GPU result."]
    lines.append("")
    md, png = Path(reports_dir) / f"sweep_{r.recipe}.md", Path(reports_dir) / f"sweep_{r.recipe}.png"
    written = [md]
    if any(p.speedup for p in r.points):
        atomic_write_bytes(png, _plot(r))
        written.append(png)
    atomic_write_text(md, "\n".join(lines))
    return written


def failures(r: SweepResult) -> list[str]:
    """What went wrong, point by point: a failed run, a failed parity (with by how much)."""
    out = []
    for p in r.points:
        out += [f"{r.knob} {p.value}: {f}" for f in p.failed]
        if p.parity_ok is False:
            out.append(f"{r.knob} {p.value}: parity FAILED: {p.parity_failure or 'see the report'}")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    result, reports_dir = run_sweep(argv)
    written = render(result, reports_dir)
    written += index.render(reports_dir)
    print(f"regime: {result.crossover}\nreport: {', '.join(map(str, written))}", flush=True)
    wrong = failures(result)
    if wrong:  # the last line says why
        print(f"sweep {result.recipe}: exit status 1: " + "; ".join(wrong), file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.sweep")
