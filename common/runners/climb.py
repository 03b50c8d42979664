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
from common.analysis import coldstart, stats
from common.analysis.aggregate import aggregate, parity, parity_failure
from common.analysis.results import write_result
from common.analysis.results_compare import LadderRounds, LadderSummary, Rung
from common.cli import OneLineParser, check_script_flags, split_passthrough
from common.errors import CookbookError, exit_with
from common.render.ladder import render
from common.runners import launch
from common.workload_specs import workload_names


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


def climbed(workload: str, cuda: bool) -> tuple[list[int], dict[str, str]]:
    """The rungs that run here, and why the others are skipped (a technique this device lacks)."""
    skip = ladder.skipped(workload, launch.device_profile(cuda))
    return [i for i, r in enumerate(ladder.spec(workload).rungs) if r.id not in skip], skip


def climb(workload, args, cuda, cpus, results_dir, reports_dir, command, counter=None) -> LadderSummary:
    """Every rung of one ladder, `rounds_of(args)` times; counter: the progress over every ladder of the run."""
    spec = ladder.spec(workload)
    indices, skip = climbed(workload, cuda)
    for rung_id, why in skip.items():
        print(f"{workload} rung {spec.ids.index(rung_id)} ({rung_id}): skipped, {why}", flush=True)
    mode = "smoke" if args.smoke else "cuda" if cuda else "cpu"
    rounds = rounds_of(args)
    flags = ["--device", args.device] + (["--smoke"] if args.smoke else [])
    flags += launch.data_flags(args.data, [workload])[workload] + args.script_args
    out_dir = results_dir / workload
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = Path(reports_dir) / "traces" / "ladder" / workload
    counter = counter or launch.Counter({workload: (rounds * len(indices),) * 2})

    def run_one(i, round_no):
        rung_flags = ["--rung", str(i), "--trace-dir", str(traces / f"rung{i}"), *flags,
                      *spec.rungs[i].flags.get(mode, [])]
        if round_no > 1:
            rung_flags += ["--profile-steps", "0", "--probe-steps", "0"]  # evidence and parity: round 1
        return launch.child(["-m", spec.script], rung_flags, out_dir / f"rung{i}_r{round_no}.json", cpus=cpus,
                             rerun="make ladder")

    done = launch.rounds(indices, run_one, rounds, counter, workload,
                         lambda i, n: f"{workload} rung {i} ({spec.rungs[i].name}) round {n}")
    runs, failures = done.runs, [outcome.failure(f"rung {i}", n) for i, n, outcome in done.failures]
    return summarize(workload, runs, failures, rounds, mode, command, cpus, skip)


def per_sample_ms(agg) -> list[float]:
    """Per-process time per sample: a throughput that stays comparable when the batch changes."""
    return [m / agg.config.batch_size for m in agg.process_ms]


def summarize(workload, runs, failures, rounds, mode, command, cpus=(), skip=None) -> LadderSummary:
    """Each rung against rung 0 and the rung below it that ran (a skipped one is passed over)."""
    spec = ladder.spec(workload)
    base = aggregate(runs[0]) if 0 in runs else None
    table, below, below_runs = [], None, None
    for i, rs in enumerate(spec.rungs):
        if rs.id in (skip or {}):
            table.append(Rung(index=i, id=rs.id, name=rs.name, adds=rs.adds, status="skipped", skipped=skip[rs.id]))
            continue
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
                if (coldstart.compiled(runs[i]) and not coldstart.compiled(below_runs)
                        and below.config.batch_size == agg.config.batch_size):  # steps of one size compare
                    rung.break_even = coldstart.break_even(
                        [coldstart.one_time_s(r.timing) for r in below_runs],
                        [coldstart.one_time_s(r.timing) for r in runs[i]], coldstart.measured(below_runs, "step"),
                        coldstart.measured(runs[i], "step"),
                        runs[i][0].timing.warmup_steps + runs[i][0].timing.summary.n)
        below, below_runs = agg, runs.get(i)
        table.append(rung)
    return LadderSummary(workload=workload, what=spec.what, mode=mode, command=command, rungs=table,
                         failures=failures, rounds=LadderRounds(rounds=rounds, cpus=list(cpus), method=stats.METHOD))


def check(args) -> None:
    """What the ladders will be given, checked before any rung runs: the --data paths as their loaders
    read them, and the flags after -- as each ladder script's parser reads them."""
    launch.data_flags(args.data, workload_names())
    launch.check_data(args.data, workload_names())  # every path given
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
    counter = launch.Counter({w: (rounds_of(args) * len(climbed(w, cuda)[0]),) * 2 for w in workloads})
    wrong, short = [], []
    for w in workloads:
        with launch.warm_server(cuda, compiles=True):  # a rung compiles
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
