"""The seed's four-phase diagnosis as a command: `make diagnose-<workload>`.

    python -m common.runners.diagnose WORKLOAD [--smoke] [--device auto|cuda|cpu] [--data synthetic|WORKLOAD=PATH]
    python -m common.runners.diagnose --script path/to/my_script.py      # any harness script

It runs the workload's naive baseline (baselines/) once with per-phase timing and memory recording,
then reads the measurements in the seed's order:
  1. baseline: step time statistics, throughput, memory, and the conditions (GPU clocks, power, ...)
  2. bottleneck type: what each suspect costs, as a share of the step, measured
  3. component: data, copy, forward, backward, optimizer timed with CUDA events (perf_counter on CPU)
  4. operations: the profiler's top ops and the time per kind of op (linear, relu, dropout, ...)
and writes reports/baseline_<workload>.md. The findings are ranked by what they cost: the headline
is the largest measured cost, with its number, and the recipes that address it.
"""
import argparse
import sys
from pathlib import Path

from common import catalog
from common.analysis.diagnosis import analyse
from common.analysis.results import write_result
from common.cli import OneLineParser, check_script_flags, split_passthrough
from common.errors import CookbookError, exit_with
from common.render.diagnosis import render
from common.runners import launch
from common.workload_specs import workload_names, workload_spec


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.diagnose", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", nargs="?", choices=[w for w in workload_names() if workload_spec(w).baseline],
                   help="diagnose this workload's baseline")
    p.add_argument("--script", help="diagnose another harness script instead (a path)")
    launch.add_flags(p)
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    if (args.workload is None) == (args.script is None):
        p.error(f"give a workload ({' or '.join(workload_names())}) or --script PATH, not both")
    if args.script and not Path(args.script).is_file():
        raise CookbookError(f"--script {args.script}: no such file")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    cuda = launch.use_cuda(args.device)
    reports = Path(args.reports_dir)
    name = args.workload or Path(args.script).stem
    workload = args.workload or catalog.identify(args.script)[1]
    data = launch.data_flags(args.data, workload_names())[workload]
    launch.check_data(args.data, workload_names())  # every path given, as its loader reads it
    cpus = launch.cpu_set(args.cpus)
    if args.script_args:  # as the script's parser reads them; a --script may add flags of its own
        import baselines

        check_script_flags(args.script_args, workload, {} if args.script else baselines.DEFAULTS,
                           prog=str(args.script) if args.script else f"python -m {workload_spec(workload).baseline}",
                           reserved=("out", "trace_dir", "memory_dir"), known_only=bool(args.script))
    out_dir = launch.output_folder(reports, "diagnose", name)  # checked ...
    launch.make_folder(out_dir, reports)  # ... and created once every input has passed
    target = ["-m", workload_spec(args.workload).baseline] if args.workload else [str(Path(args.script).resolve())]
    # no learning probe: it serves parity between twins, and a diagnosis runs one script
    flags = ["--phase-timing", "--probe-steps", "0", "--memory-dir", str(out_dir / "memory"),
             "--trace-dir", str(reports / "traces" / "diagnose" / name),
             "--device", args.device] + (["--smoke"] if args.smoke else [])
    flags += data + args.script_args
    launch.ensure_ceiling(cuda)  # in a child first: never inside the measured run
    print(f"diagnose {name}: running {' '.join(target)} with per-phase timing (log: {out_dir / 'result.log'})",
          flush=True)
    outcome = launch.child(target, flags, out_dir / "result.json", cpus=cpus, echo=launch.echo,
                            rerun=f"make diagnose-{workload}")
    if outcome.kind != "ok":
        why = (f"ran out of memory ({outcome.result.oom.stage})" if outcome.kind == "oom"
               else f"failed (exit {outcome.returncode})")
        print(f"diagnose {name}: the run {why} after {outcome.seconds:.0f} s; see {outcome.log}", file=sys.stderr)
        return 1
    result = outcome.result
    analysis = analyse(result)
    command = (f"make diagnose-{args.workload}" if args.workload and not argv[1:]
               else "python -m common.runners.diagnose " + " ".join(argv))
    written = render(name, result, analysis, command, reports)
    write_result(out_dir / "analysis.json", analysis)
    print(f"verdict: {analysis.verdict}")
    for f in analysis.findings:
        print(f"  - {f.kind} ({f.cost:.0%} of the step): {f.says} -> recipes: {', '.join(f.recipes) or 'none'}")
    print("report: " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.diagnose")
