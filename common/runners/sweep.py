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
from common.analysis.regime import crossover
from common.analysis.results import write_result
from common.analysis.results_sweep import Point, SweepResult
from common.cli import OneLineParser, check_script_flags, check_value, split_passthrough
from common.errors import CookbookError, exit_with
from common.render import index
from common.render.sweep import render
from common.runners import launch
from common.spec import Sweep
from common.workload_specs import workload_names


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.sweep", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    launch.add_flags(p, rounds_help="rounds per point (default 3 on CUDA, 2 on a CPU and with --smoke)")
    p.add_argument("--values", help="the knob's values, comma-separated (default: the recipe's sweep for this device)")
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    return args


def spec_of(recipe: str) -> Sweep:
    spec = catalog.spec(recipe).sweep
    if spec is None:
        have = catalog.swept()
        raise CookbookError(f"recipe {recipe!r} has no sweep; these do: {', '.join(have)}")
    return spec


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
    not_applicable: str | None = None  # the device lacks what the technique needs (catalog.not_applicable)


def knob_values(text: str | None, spec: dict, mode: str, recipe: str) -> list[int]:
    """--values, each by the scripts' own rule for the knob (--batch-size 1 or more, --workers 0 or
    more), or the recipe's values for this mode."""
    if not text:
        return spec.values[mode]
    pair = spec.pair
    overrides = catalog.spec(recipe).defaults
    values = []
    for part in text.split(","):
        try:
            value = check_value(spec.flag, part.strip(), catalog.workload_of(pair), overrides, pair)
        except CookbookError as e:
            raise CookbookError(f"--values {text!r}: {part.strip()!r} is not a valid {spec.knob} ({e}); give whole "
                                f"numbers separated by commas, e.g. {','.join(map(str, spec.values[mode]))}") \
                from None
        if value in values:  # one point per value: a repeat is a typo, not more rounds (--rounds gives those)
            raise CookbookError(f"--values {text!r}: {spec.knob} {value} is given twice; give each value once "
                                "(more processes per point: --rounds N)")
        values.append(value)
    return sorted(values)


def make_plan(argv) -> SweepPlan:
    args = parse_args(argv)
    recipe = catalog.check_stepped(args.recipe, "a sweep")
    spec = spec_of(recipe)
    cuda = launch.use_cuda(args.device)
    mode = "smoke" if args.smoke else "cuda" if cuda else "cpu"
    values = knob_values(args.values, spec, mode, recipe)
    rounds = args.rounds or (3 if cuda and not args.smoke else 2)
    pair = spec.pair
    workload = catalog.workload_of(pair)
    data = launch.data_flags(args.data, [workload])[workload]
    launch.check_data(args.data, workload_names())  # every path given, read as its loader reads it
    cpus = launch.cpu_set(args.cpus)
    if args.script_args:
        knob = spec.flag.lstrip("-").replace("-", "_")  # the sweep sets it: --values, not -- --batch-size
        check_script_flags(args.script_args, workload, catalog.spec(recipe).defaults, pair,
                           prog=f"python -m recipes.{recipe}.{pair}_slow",
                           reserved={"out": None, knob: "it is the sweep's knob: give its values with --values"})
    out_dir = launch.output_folder(args.reports_dir, "sweep", recipe)  # checked; created when the sweep starts
    flags = ["--device", args.device, "--profile-steps", "0"] + (["--smoke"] if args.smoke else [])
    return SweepPlan(recipe=recipe, spec=spec, cuda=cuda, mode=mode, values=values, rounds=rounds, cpus=cpus,
                     out_dir=out_dir, flags=flags + data + args.script_args, reports_dir=Path(args.reports_dir),
                     not_applicable=catalog.not_applicable(recipe, launch.device_profile(cuda)))


def run_sweep(argv) -> tuple[SweepResult, Path]:
    plan = make_plan(argv)
    with launch.warm_server(plan.cuda, catalog.compiles(plan.recipe)):
        return _swept(plan, argv)


def _swept(plan: SweepPlan, argv) -> tuple[SweepResult, Path]:
    recipe, spec, values, rounds, cpus, flags = plan.recipe, plan.spec, plan.values, plan.rounds, plan.cpus, plan.flags
    out_dir = launch.make_folder(plan.out_dir, plan.reports_dir)  # every input has passed: now the first write
    pair = spec.pair
    title = catalog.spec(recipe).title
    rule = catalog.parity_rule(recipe, pair)
    command = "make sweep-" + recipe if not argv[1:] else "python -m common.runners.sweep " + " ".join(argv)
    if plan.not_applicable:
        print(f"sweep {recipe}: {plan.not_applicable}; nothing timed", flush=True)
        result = SweepResult(recipe=recipe, title=title, pair=pair, knob=spec.knob, flag=spec.flag,
                             mode=plan.mode, rounds=rounds, points=[], command=command,
                             crossover=plan.not_applicable, not_applicable=plan.not_applicable)
        write_result(out_dir / "sweep.json", result)
        return result, plan.reports_dir
    launch.ensure_ceiling(plan.cuda)
    total = len(values) * rounds * 2
    counter = launch.Counter({value: (rounds * 2,) * 2 for value in values})
    print(f"sweep {recipe}/{pair} over {spec.knob} {values}: {rounds} round(s) per point, {total} runs, "
          f"cores {env.cpu_ranges(cpus)}; logs in {out_dir}", flush=True)
    points = []
    for value in values:
        point = Point(value=value)

        def run_one(variant, round_no, value=value):
            return launch.child(["-m", f"recipes.{recipe}.{pair}_{variant}"],
                                 flags + [spec.flag, str(value)]
                                 + (["--probe-steps", "0"] if round_no > 1 else []),  # parity: round 1
                                 out_dir / f"{pair}_{variant}_{value}_r{round_no}.json", cpus=cpus,
                                 rerun=f"make sweep-{recipe}")

        done = launch.rounds(catalog.VARIANTS, run_one, rounds, counter, value,
                             lambda v, n, value=value: f"{spec.knob} {value}: {v} round {n}")
        runs = done.runs
        point.failed = [f"{v} round {n}: exit {o.returncode} ({o.log})" for v, n, o in done.failures]
        point.slow = aggregate(runs["slow"]) if "slow" in runs else None
        point.fast = aggregate(runs["fast"]) if "fast" in runs else None
        if point.slow and point.fast and point.slow.status == point.fast.status == "ok":
            point.speedup = stats.speedup(point.slow.process_ms, point.fast.process_ms)
            checked = parity(runs["slow"][0], runs["fast"][0], rule)
            point.parity_ok = checked.ok
            point.parity_failure = "" if checked.ok else parity_failure(checked)
            print(f"    {spec.knob} {value}: {stats.describe(point.speedup, 'fast')}", flush=True)
        points.append(point)
    result = SweepResult(recipe=recipe, title=title, pair=pair, knob=spec.knob, flag=spec.flag,
                         mode=plan.mode, rounds=rounds, points=points, command=command)
    result.crossover = crossover(points, spec.knob)
    write_result(out_dir / "sweep.json", result)
    write_result(plan.reports_dir / "results" / "sweep" / recipe / "sweep.json", result)  # the latest
    return result, plan.reports_dir


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
