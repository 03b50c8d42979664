"""The doctor: the cookbook's diagnosis, run on your own training script, unmodified.

    make doctor SCRIPT=path/to/train.py ARGS='its own args' [FLAGS='--step forward' | FLAGS='--try']
    python -m common.runners.doctor path/to/train.py [--step auto|optimizer|backward|forward|batch]
        [--warmup N] [--steps N] [--time S] [--profile-steps N] [--try [FIX,...|all]] [--try-budget S]
        [--reports-dir DIR] [--cpus LIST] [--cwd DIR] -- its own args

The script runs in a child process (common.measure.observer) in its own folder (or --cwd DIR), with
its own arguments, as `cd folder && python train.py` would run it; the measurement is installed around it (optimizer
step hooks, the DataLoader's iterator, the model's calls, backward), and the script is stopped once
warm-up, timed, profiled and FLOP-counted steps are done. The verdict ranks what each suspect costs
(data loading, host syncs, launch overhead, compute, the script's own code) with the cost model of
`make diagnose-*`, then lists what the compute could gain from the settings seen, each with the
recipe that fixes it and that recipe's measured figure. With --try, each applicable fix (or each one
named) is then applied to the script from outside and measured on it (common.runners.trials): the
report's headline becomes the best measured gain. Report: reports/doctor_<name>_<hash>.md. A script
that runs out of memory gets a report of where, and on CUDA a second run records the allocator's
history for a snapshot at the error (out_of_memory); the doctor then exits with status 3.
"""
import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from common import catalog, env
from common.analysis import doctor, figures
from common.analysis import fixes as catalog_fixes
from common.analysis.results import read_result, write_result
from common.analysis.results_doctor import Observation
from common.analysis.results_run import OutOfMemory, oom_path
from common.cli import (
    DOCTOR_MIN_TIMED,
    OneLineParser,
    add_doctor_flags,
    doctor_flags,
    positive_float,
    split_passthrough,
)
from common.errors import EXIT_COOKBOOK_FAULT, EXIT_OOM, CookbookError, exit_with
from common.render import doctor as report
from common.runners import launch, trials

STEP_HELP = ("it never called optimizer.step() nor backward() (inference?): name its step with "
             "--step forward (each call of the top-level model) or --step batch (each batch drawn from a "
             "DataLoader); with make: FLAGS='--step forward'")


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.doctor", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", nargs="?", help="your training script (a .py file)")
    add_doctor_flags(p)
    p.add_argument("--reports-dir", default=str(env.LOCAL_REPORTS), type=lambda d: str(Path(d).absolute()),
                   help="where the report goes (default reports/local/, untracked)")
    p.add_argument("--cpus", metavar="LIST", help="pin the script to these cores, e.g. 1-15")
    p.add_argument("--cwd", metavar="DIR", help="the folder the script runs in, where its relative paths are read "
                                               "(default: the script's own folder, as `cd folder && python train.py`)")
    p.add_argument("--try", dest="try_fixes", nargs="?", const="", metavar="FIX,...",
                   help="then apply each fix to the script from outside and measure it there: the applicable ones "
                        f"(bare --try), the ones named, or all ({', '.join(catalog_fixes.FIXES)})")
    p.add_argument("--try-budget", type=positive_float, metavar="SECONDS",
                   help="the time every --try run may take together (default: sized from the doctor's own run: "
                        f"each fix and the unchanged script for {trials.PLANNED_ROUNDS} rounds, said up front)")
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    if args.try_budget is not None and args.try_fixes is None:
        raise CookbookError("--try-budget: give --try as well (the budget is --try's)")
    args.test_fixes = catalog_fixes.test_fixes_on()
    args.fix_names = trials.wanted(args.try_fixes, args.test_fixes) if args.try_fixes is not None else None
    if not args.script:
        raise CookbookError("give the script: make doctor SCRIPT=path/to/train.py [ARGS='its args'], or "
                            "python -m common.runners.doctor path/to/train.py -- its args")
    path = Path(args.script)
    if not path.is_file():
        raise CookbookError(f"{args.script}: no such file; give the path of your Python script")
    args.cwd = Path(args.cwd).absolute() if args.cwd else path.resolve().parent
    if not args.cwd.is_dir():
        raise CookbookError(f"--cwd {args.cwd}: no such folder; give the folder the script should run in")
    return args


def missing_path(outcome, cwd: Path) -> str | None:
    """One line for a script that could not find a file: the folder it ran in, and the flag."""
    said = next((line.strip() for line in reversed(outcome.tail)
                 if "No such file or directory" in line or line.strip().startswith("FileNotFoundError:")), None)
    if said is None:
        return None
    return (f"doctor: the script ran in {cwd} and could not find a file ({said[-160:]}); its relative paths are "
            "read from there: --cwd DIR runs it elsewhere (make doctor FLAGS='--cwd DIR')")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    script = Path(args.script).resolve()
    name = report.report_name(script)
    cpus = launch.cpu_set(args.cpus)
    reports = Path(args.reports_dir)
    out_dir = launch.output_folder(reports, "doctor", name)  # checked ...
    launch.make_folder(out_dir, reports)  # ... and created once every input has passed
    flags = doctor_flags(args) + ["--trace-dir", str(reports / "traces" / "doctor" / name), "--cwd", str(args.cwd),
                                  "--", str(script), *args.script_args]
    launch.ensure_ceiling(launch.cuda_available())  # in a child first: never inside the user's job
    print(f"doctor: running {shlex.join([os.path.relpath(script), *args.script_args])} "
          f"(log: {out_dir / 'observation.log'})", flush=True)
    kills = launch.oom_kills()
    outcome = launch.child(["-m", "common.measure.observer"], flags, out_dir / "observation.json", cpus=cpus,
                           echo=launch.echo, read=None)
    if outcome.returncode == EXIT_OOM and oom_path(out_dir / "observation.json").is_file():
        return out_of_memory(argv, flags, out_dir, reports, cpus, outcome.seconds)
    if outcome.returncode in (-9, 137):  # SIGKILL: a host out of memory ends here, not in an exception
        now = launch.oom_kills()
        print("doctor: the script was killed (SIGKILL)" + (
            f": the kernel's out-of-memory killer ran while it did (/proc/vmstat oom_kill {kills} -> {now}): it "
            "ran out of the host's memory" if None not in (kills, now) and now > kills else
            ": on Linux most often the kernel's out-of-memory killer (`dmesg` says)"), file=sys.stderr)
    if outcome.kind != "ok":
        if outcome.returncode != EXIT_COOKBOOK_FAULT and (line := missing_path(outcome, args.cwd)):
            print(line, file=sys.stderr)
        who = ("the cookbook's own code failed (a bug in the cookbook, not your script)"
               if outcome.returncode == EXIT_COOKBOOK_FAULT else "the script failed")
        print(f"doctor: {who} (exit {outcome.returncode}) after {outcome.seconds:.0f} s; "
              f"its output: {outcome.log}; no report written", file=sys.stderr)
        return outcome.returncode or 1
    obs = read_result(out_dir / "observation.json", Observation, "make doctor SCRIPT=...")
    if obs.result is None:
        why = (STEP_HELP if obs.ended == "no step" or (obs.step in ("auto", "optimizer") and obs.steps_seen == 0)
               else f"the script ended after {obs.steps_seen} steps, in the {obs.stage}: too few to time (the "
                    f"doctor needs {args.warmup} warm-up steps and {DOCTOR_MIN_TIMED} timed ones; --warmup 1 needs "
                    "the fewest, or let the script run longer)")
        print(f"doctor: no report: {why}", file=sys.stderr)
        return 1
    verdict = doctor.read(obs)
    write_result(out_dir / "verdict.json", verdict)
    tried = None
    if args.try_fixes is not None:
        sized, how = trials.budget(obs, args.fix_names, outcome.seconds, args.test_fixes)
        given = args.try_budget is not None
        print(f"doctor --try: a budget of {args.try_budget if given else sized:.0f} s "
              + ("(--try-budget; " + f"its verdicts need about {sized:.0f} s: {how})" if given
                 else f"({how}; --try-budget SECONDS sets another)"), flush=True)
        if small := trials.too_small(obs, args.fix_names, outcome.seconds, args.try_budget if given else sized,
                                     args.test_fixes):
            print(f"doctor --try: {small}", flush=True)
        plan = trials.TrialPlan(script=script, script_args=args.script_args, cpus=cpus, out_dir=out_dir / "try",
                           flags=trial_flags(args), profile_steps=args.profile_steps,
                           budget_s=args.try_budget if given else sized, started=time.perf_counter(), cwd=args.cwd)
        tried = trials.run(obs, args.fix_names, plan, args.test_fixes)  # fresh interpreters: see docs/doctor.md
        write_result(out_dir / "trials.json", tried)
    found = figures.read(env.REPO_ROOT / "reports", catalog.available())
    command = "python -m common.runners.doctor " + shlex.join(argv)
    path = report.render(obs, verdict, found, command, reports, tried)
    print(f"Headline: {tried.headline if tried else verdict.headline}")
    for f in verdict.diagnosis.findings:
        print(f"  - {f.kind} ({f.cost:.0%} of the step) -> recipes: {', '.join(f.recipes) or 'none'}")
    for g in verdict.gains:
        print(f"  - could gain: {g.kind} -> recipes: {', '.join(g.recipes)}")
    if obs.result and obs.result.timing and obs.result.timing.bursts:
        print(f"  - steps in bursts: {obs.result.timing.bursts.words}")
    for t in tried.rows if tried else []:
        print(f"  - tried {t.fix}: {report.trial_result(t)}")
    print(f"report: {path}")
    return 0


RERUN_AT_MOST = 3  # times the first run's time: recording slows allocations, a hang must not hold the doctor
DISTRIBUTED = ("WORLD_SIZE", "LOCAL_RANK")  # torchrun's: a rank run again alone would wait for the others


def out_of_memory(argv, flags: list[str], out_dir: Path, reports: Path, cpus, first_s: float) -> int:
    """The script ran out of memory: on CUDA it runs once more with the allocator's history recorded from
    its start (recording slows every allocation, so never in the measured run), for the snapshot at the
    error; then a report of where it ran out, the figures, the snapshot and the recipes that cut memory."""
    oom = first = read_result(oom_path(out_dir / "observation.json"), OutOfMemory, "make doctor SCRIPT=...")
    distributed = [v for v in DISTRIBUTED if v in os.environ]
    if oom.device == "cuda" and distributed:
        oom.notes.append(f"no snapshot: a rank of a distributed run ({', '.join(distributed)} set) is not run "
                         "again alone; `--memory-snapshot` on a recipe, or torch.cuda.memory._record_memory_history "
                         "in the script, records one")
    elif oom.device == "cuda" and launch.cuda_available():
        snapshot = out_dir / "oom_memory_snapshot.pickle"
        snapshot.unlink(missing_ok=True)  # an earlier run's is not this one's
        rerun = out_dir / "oom_rerun.json"
        print(f"doctor: the script ran out of CUDA memory ({oom.stage}, after {oom.steps_seen} steps); running it "
              "once more with the allocator's history recorded from its start, for a snapshot at the error "
              f"(log: {rerun.with_suffix('.log')})", flush=True)
        cut = flags.index("--")
        again = launch.child(["-m", "common.measure.observer"],
                             flags[:cut] + ["--oom-snapshot", str(snapshot)] + flags[cut:], rerun, cpus=cpus,
                             read=None, timeout=max(RERUN_AT_MOST * first_s, 120.0))
        if again.returncode == EXIT_OOM and oom_path(rerun).is_file():
            oom = read_result(oom_path(rerun), OutOfMemory, "make doctor SCRIPT=...")
            if (oom.stage, oom.steps_seen) != (first.stage, first.steps_seen):
                oom.notes.append(f"the second run ran out elsewhere ({oom.stage}, after {oom.steps_seen} steps) "
                                 f"than the first ({first.stage}, after {first.steps_seen} steps): the figures and "
                                 "the snapshot are the second's")
        elif again.kind == "cut":
            oom.notes.append(f"its second run, recording the allocator's history, was stopped after "
                             f"{again.seconds:.0f} s ({RERUN_AT_MOST}x the first run's time): no snapshot; "
                             f"{env.shown_path(again.log)}")
        else:
            oom.notes.append(f"its second run, recording the allocator's history, did not run out of memory "
                             f"(exit {again.returncode}; {env.shown_path(again.log)}): no snapshot; the failure "
                             "depends on more than the script (other processes on the GPU, say)")
    elif oom.device == "other":
        oom.notes.append("a memory snapshot records CUDA's caching allocator: this ran out of another "
                         "accelerator's memory")
    elif oom.device != "cuda":
        oom.notes.append("a memory snapshot records CUDA's caching allocator: this ran out of the host's memory, "
                         "which it does not see")
    write_result(out_dir / "oom.json", oom)
    found = figures.read(env.REPO_ROOT / "reports", catalog.available())
    path = report.render_oom(oom, Path(flags[flags.index("--") + 1]), found,
                             "python -m common.runners.doctor " + shlex.join(argv), reports)
    print(f"Headline: {report.oom_headline(oom)}")
    if oom.snapshot:
        print(f"  memory snapshot: {oom.snapshot}; to view it: {oom.view_snapshot}")
    print(f"report: {path}")
    return EXIT_OOM


def trial_flags(args) -> list[str]:
    """The doctor's flags for each --try run: its timed stretch capped (trials.TRY_TIME), the
    profiled steps set per round by the trials."""
    flags = doctor_flags(args)
    at = flags.index("--time")
    flags[at + 1] = str(min(args.time, trials.TRY_TIME))
    at = flags.index("--profile-steps")
    return flags[:at] + flags[at + 2:]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.doctor")
    except KeyboardInterrupt:
        print("doctor: interrupted: no report written", file=sys.stderr)
        sys.exit(130)
