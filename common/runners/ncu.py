"""Nsight Compute on a recipe's pairs: the heaviest kernels of one timed step of each twin, slow vs fast.

    python -m common.runners.ncu amp [--workloads resnet18] [--top 12] [--phase step|forward] [-- twin flags]
    -> reports/ncu_<recipe>.md; each twin's ncu report, CSV and log in reports/results/ncu/<recipe>/<run id>/

Each twin runs its preset warm-up (cuDNN's autotuning and compilation stay outside), then 2 timed
steps. The harness opens a cudaProfilerStart/Stop window around timed step 1 (COOKBOOK_KERNEL_STEP), and
ncu, started with --profile-from-start off, profiles every kernel launched inside it, the backward's
included. --phase forward keeps only the kernels inside the harness's "forward" NVTX range.
"""
import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from common import catalog, env
from common.analysis import ncu
from common.cli import OneLineParser, check_script_flags, pick, positive_int, split_passthrough
from common.errors import CookbookError, exit_with
from common.files import atomic_write_text
from common.render import ncu as render
from common.runners import launch
from common.workload_specs import workload_names

STEP = 1  # the timed step profiled: the second, so that nothing of the first timed step's start is in it
# NVTX: the harness's ranges live in the "cookbook" domain with the nvtx package, in the default one without
PHASES = {"step": [], "forward": ["--nvtx", "--nvtx-include", "cookbook@forward/", "--nvtx-include", "forward/"]}
SCOPE = {"step": f"every kernel of timed step {STEP}",
         "forward": f"the kernels of timed step {STEP} inside the harness's `forward` NVTX range"}
RESERVED = {"out": None, "steps": "the runner profiles one timed step", "profile_steps": None, "probe_steps": None,
            "min_time": None, "device": "ncu profiles CUDA kernels: the twins run on cuda"}


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.ncu", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    p.add_argument("--workloads", metavar="LIST", help="only these pairs, comma-separated (default: all)")
    p.add_argument("--top", type=positive_int, default=12, help="kernels shown per twin, heaviest first (default 12)")
    p.add_argument("--phase", choices=sorted(PHASES), default="step",
                   help="step: every kernel of the step (default); forward: the forward's only")
    launch.add_flags(p)
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    return args


def check(args):
    """Every input, in the order a user fixes them, before anything is run or written: the recipe,
    its pairs, the flags and folders, then the tools (ncu, a CUDA device).
    Returns (recipe, pairs, ncu path, results folder, cores)."""
    recipe = catalog.check_stepped(args.recipe, "Nsight Compute")
    spec = catalog.spec(recipe)
    if spec.distributed:
        raise CookbookError(f"ncu-{recipe}: a torchrun recipe's ranks are not profiled here; its communication "
                            "kernels are in the HTA lines of reports/" + recipe + ".md")
    pairs = pick("--workloads", args.workloads, catalog.workloads(recipe), f"{recipe} pair")
    if args.device == "cpu":
        raise CookbookError("--device cpu: ncu profiles CUDA kernels; run it on a GPU")
    launch.check_data(args.data, workload_names())
    for pair in pairs:
        check_script_flags(args.script_args, catalog.workload_of(pair), spec.defaults, pair,
                           prog=f"python -m recipes.{recipe}.{pair}_slow", reserved=RESERVED)
    folder = launch.output_folder(args.reports_dir, "ncu", recipe)  # checked; created once all has passed
    cpus = launch.cpu_set(args.cpus)
    tool = shutil.which("ncu")
    if tool is None:
        raise CookbookError("ncu not found: install NVIDIA Nsight Compute (it comes with the CUDA toolkit) and put "
                            "ncu on PATH; the recipe's report has the profiler's kernel table without it")
    if not launch.cuda_available():
        raise CookbookError("no CUDA device here: ncu profiles CUDA kernels; run it on a GPU")
    return recipe, pairs, tool, folder, cpus


def ncu_said(log: Path) -> str:
    """ncu's own errors and warnings in a twin's log (a counter permission, no kernel profiled), as a clause."""
    try:
        said = [line.strip() for line in log.read_text(errors="replace").splitlines()
                if line.startswith(("==ERROR==", "==WARNING=="))]
    except OSError:
        return ""
    return f": {' '.join(said[-2:])}" if said else ""


def profile(tool: str, recipe: str, pair: str, variant: str, folder: Path, flags: list[str], phase: str, cpus):
    """One twin under ncu: (Twin, None) or (None, what failed)."""
    stem = folder / f"{pair}_{variant}"
    under = [tool, "--profile-from-start", "off", "--target-processes", "all", "--metrics", ",".join(ncu.METRICS),
             *PHASES[phase], "--force-overwrite", "--export", str(stem)]
    print(f"  {pair} {variant}: under ncu (log: {stem}.log)", flush=True)
    outcome = launch.child(["-m", f"recipes.{recipe}.{pair}_{variant}"], flags, stem.with_suffix(".json"),
                           cpus=cpus, under=under, extra_env={env.KERNEL_STEP_ENV: str(STEP)},
                           rerun=f"make ncu-{recipe}")
    if outcome.kind != "ok":
        return None, f"{variant}: the run {outcome.describe()}{ncu_said(outcome.log)} (log: {outcome.log})"
    if not Path(f"{stem}.ncu-rep").exists():  # ncu writes no report when nothing was profiled
        return None, (f"{variant}: ncu profiled no kernel in {SCOPE[phase]}{ncu_said(outcome.log)} "
                      f"(log: {outcome.log})")
    exported = subprocess.run([tool, "--import", f"{stem}.ncu-rep", "--csv", "--page", "details",
                               "--print-units", "base"], capture_output=True, text=True)
    if exported.returncode != 0:
        why = (exported.stderr or exported.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"{variant}: ncu --import {stem}.ncu-rep exited {exported.returncode}: {why[0]}"
    csv_path = stem.with_suffix(".csv")
    atomic_write_text(csv_path, exported.stdout)
    try:
        launches = ncu.parse(exported.stdout)
    except ncu.NcuFormatError as e:
        return None, f"{variant}: {csv_path}: {e}"
    if not launches:
        return None, f"{variant}: ncu profiled no kernel in {SCOPE[phase]} ({csv_path})"
    print(f"  {pair} {variant}: {len(launches)} kernel launches profiled in {outcome.seconds:.0f} s", flush=True)
    return render.Twin(outcome.result, launches, env.shown_path(csv_path)), None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    recipe, pairs, tool, folder, cpus = check(args)
    reports = Path(args.reports_dir)
    launch.make_folder(folder, reports)
    data = launch.data_flags(args.data, workload_names())
    found = []
    for pair in pairs:
        flags = ["--device", "cuda", "--steps", str(STEP + 1), "--min-time", "0", "--profile-steps", "0",
                 "--probe-steps", "0", *(["--smoke"] if args.smoke else []), *data[catalog.workload_of(pair)],
                 *args.script_args]
        twins, failures = {}, []
        for variant in catalog.VARIANTS:
            twins[variant], failure = profile(tool, recipe, pair, variant, folder, flags, args.phase, cpus)
            failures += [failure] if failure else []
        found.append(render.PairKernels(pair, twins["slow"], twins["fast"], failures))
    for p in found:
        for f in p.failures:
            print(f"ncu-{recipe} {p.pair}: FAILED {f}", file=sys.stderr)
    if not any(p.slow and p.fast for p in found):
        print(f"ncu-{recipe}: no pair profiled: {reports / f'ncu_{recipe}.md'} is left as it was", file=sys.stderr)
        return 1
    command = f"make ncu-{recipe}" if argv == [recipe] else "python -m common.runners.ncu " + " ".join(argv)
    path = reports / f"ncu_{recipe}.md"
    atomic_write_text(path, render.render_markdown(recipe, found, args.top, SCOPE[args.phase], command))
    print(f"report: {path}")
    return 1 if any(p.failures for p in found) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.ncu")
    except KeyboardInterrupt:
        print("interrupted: the previous report is left as it was", file=sys.stderr)
        sys.exit(130)
