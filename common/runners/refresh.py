"""`make refresh BUDGET=540`: the real targets, within a time budget, those whose committed report
is missing or oldest first, so that each short stretch of GPU time ends with reports to commit.

    python -m common.runners.refresh [--budget SECONDS] [--only NAME,...] [--dry-run] [--tar FILE]

A target is a recipe (reports/<recipe>.md), a sweep (sweep_<recipe>.md), a ladder (ladder_<workload>.md),
a diagnosis (baseline_<workload>.md), the doctor's example or amp's kernels under Nsight Compute
(ncu_amp.md, where ncu is on PATH), run with its defaults. Its age is the date of the last commit
that touched its report (never committed: first). A target starts only if its expected time fits in
what is left: the time it took last on this machine (reports/results/refresh.json), else a default
per kind. After each target that ends, the reports a GPU run commits (the .md, .png and _diff.html
files and the overview page, no results or traces) are written to --tar as a gzipped tarball,
replaced atomically, so a call cut off at its limit still leaves what finished.
"""
import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import catalog
from common.analysis.results import atomic_write_bytes, atomic_write_text
from common.cli import OneLineParser, pick, positive_int
from common.env import REPO_ROOT
from common.errors import CookbookError, exit_with
from common.render import doctor as doctor_report
from common.runners import launch

# seconds a target takes with its defaults on an H100 when this machine has not run it yet: a
# recipe's 3-10 rounds per pair, a sweep's 5 points x 3 rounds, a ladder's rungs x 2 rounds
DEFAULT_S = {"recipe": 240, "sweep": 300, "ladder": 420, "diagnose": 120, "doctor": 90, "ncu": 240}
REPORTS = REPO_ROOT / "reports"


@dataclass
class Target:
    name: str  # recipe-amp, sweep-amp, ladder-resnet18, diagnose-churn
    kind: str
    report: str  # its report's name under reports/
    cmd: list[str]


def targets() -> list[Target]:
    found = [Target(f"recipe-{r}", "recipe", f"{r}.md", ["-m", "common.runners.compare", r])
             for r in catalog.available()]
    found += [Target(f"sweep-{r}", "sweep", f"sweep_{r}.md", ["-m", "common.runners.sweep", r])
              for r in catalog.swept()]
    found += [Target(f"ladder-{w}", "ladder", f"ladder_{w}.md", ["-m", "common.runners.climb", w])
              for w in ("churn", "resnet18")]
    found += [Target(f"diagnose-{w}", "diagnose", f"baseline_{w}.md", ["-m", "common.runners.diagnose", w])
              for w in ("churn", "resnet18")]
    # the README's example of the doctor: the lab's baseline as a plain script
    script = "baselines/resnet18_cifar10.py"
    found.append(Target("doctor-resnet18", "doctor", f"{doctor_report.report_name(REPO_ROOT / script)}.md",
                        ["-m", "common.runners.doctor", script]))
    # the kernels of one step of amp's twins (Nsight Compute), where ncu is installed
    found.append(Target("ncu-amp", "ncu", "ncu_amp.md", ["-m", "common.runners.ncu", "amp"]))
    return found


def needs_gpus(target: Target) -> bool:
    """A recipe launched by torchrun: its GPU report needs one GPU per rank."""
    return target.kind == "recipe" and getattr(catalog.settings(target.name[len("recipe-"):]), "DISTRIBUTED", False)


def why_not_here(target: Target, gpus: int, ncu_found: bool) -> str | None:
    """Why this machine cannot make the target's committed report, or None."""
    if needs_gpus(target) and gpus < 2:  # with fewer GPUs than ranks the pairs run on the CPU: not a GPU report
        return "data-parallel pairs need 2 or more GPUs, one per rank"
    if target.kind == "ncu" and not ncu_found:
        return "ncu (Nsight Compute) is not on PATH"
    return None


def committed_at(report: str) -> int:
    """Unix time of the last commit that touched reports/<report>; 0 if none (or no git)."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%ct", "--", f"reports/{report}"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return int(out) if out.isdigit() else 0


def order(found: list[Target], age=committed_at) -> list[Target]:
    """Missing reports first, then the oldest; ties in the listed order (recipes, sweeps, ladders, diagnoses)."""
    return sorted(found, key=lambda t: age(t.report))


def expected_s(target: Target, history: dict) -> float:
    return history.get(target.name, DEFAULT_S[target.kind])


def committed_files(reports_dir: Path) -> list[Path]:
    """What a GPU run commits: reports and plots at the top of reports/, no results, traces or archive."""
    return sorted(p for p in reports_dir.iterdir()
                  if p.is_file() and (p.suffix in (".md", ".png") or p.name.endswith("_diff.html")))


def write_tar(path: Path, reports_dir: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in committed_files(reports_dir):
            tar.add(p, arcname=f"reports/{p.name}")
    atomic_write_bytes(path, buf.getvalue())


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.refresh", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=positive_int, default=540, metavar="SECONDS",
                   help="start no target that is not expected to end within this (default 540)")
    p.add_argument("--only", help="comma-separated target names (default: all, missing and oldest first)")
    p.add_argument("--dry-run", action="store_true", help="print the order, ages and expected times; run nothing")
    p.add_argument("--tar", metavar="FILE.tar.gz", help="after each target, the committed kind of reports as a tarball")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    history_path = REPORTS / "results" / "refresh.json"
    try:
        chosen = targets()
        wanted = pick("--only", args.only, [t.name for t in chosen], "target")
        chosen = [t for t in chosen if t.name in wanted]
        if args.tar and not Path(args.tar).absolute().parent.is_dir():
            raise CookbookError(f"--tar {args.tar}: no such folder")
        if not args.dry_run:
            if not launch.cuda_available():
                raise CookbookError("no CUDA device here: the committed reports come from GPU runs only "
                                    "(--dry-run shows the order)")
    except CookbookError as e:
        exit_with(e, "common.runners.refresh")
    history = json.loads(history_path.read_text()) if history_path.exists() else {}
    queue = order(chosen)
    if args.dry_run:
        for t in queue:
            age = committed_at(t.report)
            when = time.strftime("%Y-%m-%d", time.gmtime(age)) if age else "never committed"
            print(f"{t.name:<26} {when:<16} ~{expected_s(t, history):.0f} s")
        return 0
    deadline = time.perf_counter() + args.budget
    status, done = 0, []
    gpus, ncu_found = launch.cuda_device_count(), shutil.which("ncu") is not None
    skipped = {t.name: why for t in queue if (why := why_not_here(t, gpus, ncu_found))}
    for name, why in skipped.items():
        print(f"skip    {name}: {why}", flush=True)
    queue = [t for t in queue if t.name not in skipped]
    for t in queue:
        left = deadline - time.perf_counter()
        if expected_s(t, history) > left:
            print(f"skip    {t.name}: expected ~{expected_s(t, history):.0f} s, {left:.0f} s left", flush=True)
            continue
        print(f"== {t.name} (report {t.report}, {left:.0f} s left)", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, *t.cmd], cwd=REPO_ROOT).returncode
        took = time.perf_counter() - t0
        history[t.name] = round(took, 1)
        atomic_write_text(history_path, json.dumps(history, indent=1, sort_keys=True))
        print(f"{'ok' if code == 0 else f'FAILED (exit {code})':<8}{t.name} in {took:.0f} s", flush=True)
        status |= code != 0
        done.append(t.name)
        if args.tar:
            write_tar(Path(args.tar), REPORTS)
    print(f"refresh: ran {', '.join(done) or 'nothing'}; commit reports/ (see git status)", flush=True)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
