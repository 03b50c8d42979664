"""The doctor: the cookbook's diagnosis, run on your own training script, unmodified.

    make doctor SCRIPT=path/to/train.py ARGS='its own args' [FLAGS='--step forward']
    python -m common.runners.doctor path/to/train.py [--step optimizer|forward|batch] [--warmup N]
        [--steps N] [--time S] [--profile-steps N] [--reports-dir DIR] [--cpus LIST] -- its own args

The script runs in a child process (common.measure.observer) from the current folder, with its own
arguments, as `python train.py` would run it; the measurement is installed around it (optimizer
step hooks, the DataLoader's iterator, the model's calls, backward), and the script is stopped once
warm-up, timed, profiled and FLOP-counted steps are done. The verdict ranks what each suspect costs
(data loading, host syncs, launch overhead, compute, the script's own code) with the cost model of
`make diagnose-*`, then lists what the compute could gain from the settings seen, each with the
recipe that fixes it and that recipe's measured figure. Report: reports/doctor_<name>_<hash>.md.
"""
import argparse
import os
import shlex
import sys
from pathlib import Path

from common import catalog, env
from common.analysis import doctor, figures
from common.analysis.results import Observation, read_result, write_result
from common.cli import DOCTOR_MIN_TIMED, OneLineParser, add_doctor_flags, doctor_flags, split_passthrough
from common.errors import CookbookError, exit_with
from common.render import doctor as report
from common.runners import launch

STEP_HELP = ("it never called optimizer.step() (inference, or a hand-written update): name its step with "
             "--step forward (each call of the top-level model) or --step batch (each batch drawn from a "
             "DataLoader); with make: FLAGS='--step forward'")


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.doctor", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", nargs="?", help="your training script (a .py file)")
    add_doctor_flags(p)
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"),
                   type=lambda d: str(Path(d).absolute()), help="where the report goes (default reports/)")
    p.add_argument("--cpus", metavar="LIST", help="pin the script to these cores, e.g. 1-15")
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    if not args.script:
        raise CookbookError("give the script: make doctor SCRIPT=path/to/train.py [ARGS='its args'], or "
                            "python -m common.runners.doctor path/to/train.py -- its args")
    path = Path(args.script)
    if not path.is_file():
        raise CookbookError(f"{args.script}: no such file; give the path of your Python script")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    script = Path(args.script).resolve()
    name = report.report_name(script)
    cpus = launch.cpu_set(args.cpus)
    reports = Path(args.reports_dir)
    out_dir = launch.output_folder(reports, "doctor", name)  # checked ...
    launch.make_folder(out_dir, reports)  # ... and created once every input has passed
    flags = doctor_flags(args) + ["--trace-dir", str(reports / "traces" / "doctor" / name), "--", str(script),
                                  *args.script_args]
    print(f"doctor: running {shlex.join([os.path.relpath(script), *args.script_args])} "
          f"(log: {out_dir / 'observation.log'})", flush=True)
    outcome = launch.child(["-m", "common.measure.observer"], flags, out_dir / "observation.json", cpus=cpus,
                           echo=launch.echo, read=None, cwd=Path.cwd())
    if outcome.kind != "ok":
        print(f"doctor: the script failed (exit {outcome.returncode}) after {outcome.seconds:.0f} s; "
              f"its output: {outcome.log}; no report written", file=sys.stderr)
        return outcome.returncode or 1
    obs = read_result(out_dir / "observation.json", Observation, "make doctor SCRIPT=...")
    if obs.result is None:
        why = (STEP_HELP if obs.ended == "no step" or (obs.step == "optimizer" and obs.steps_seen == 0)
               else f"the script ended after {obs.steps_seen} steps, in the {obs.stage}: too few to time (the "
                    f"doctor needs {args.warmup} warm-up steps and {DOCTOR_MIN_TIMED} timed ones; --warmup 1 needs "
                    "the fewest, or let the script run longer)")
        print(f"doctor: no report: {why}", file=sys.stderr)
        return 1
    verdict = doctor.read(obs)
    write_result(out_dir / "verdict.json", verdict)
    found = figures.read(env.REPO_ROOT / "reports", catalog.available())
    command = "python -m common.runners.doctor " + shlex.join(argv)
    path = report.render(obs, verdict, found, command, reports)
    print(f"Headline: {verdict.headline}")
    for f in verdict.diagnosis.findings:
        print(f"  - {f.kind} ({f.cost:.0%} of the step) -> recipes: {', '.join(f.recipes) or 'none'}")
    for g in verdict.gains:
        print(f"  - could gain: {g.kind} -> recipes: {', '.join(g.recipes)}")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.doctor")
    except KeyboardInterrupt:
        print("doctor: interrupted: no report written", file=sys.stderr)
        sys.exit(130)
