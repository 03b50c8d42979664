"""`make gpu-check`: everything once, at small sizes, in one call: the first thing to run on a GPU.

    python -m common.runners.gpucheck [--budget SECONDS] [--jobs N] [--only TARGET,...] [--again] [--smoke]
                                      [--list]

First, alone on the machine, an A/A at the real sizes in 3 rounds (the tour's): amp's churn slow
script against itself (compare --aa), whose interval ("A/A: 1.00x, 0.98-1.02") is this machine's
noise floor; it lands in reports/results/amp/aa/, where every recipe report rendered here cites it.
Then the GPU-relevant tests, every recipe, every sweep (both ends of its range), the ladders, both
diagnoses, the doctor on both baselines, the doctor's --try on a baseline (every fix applied from
outside and timed), amp's ResNet-18 kernels under ncu (where it is installed), and (inside the
checkpointing recipe) the memory-budget search, each once with few steps, one target at a time on a
GPU (`--jobs`; 4 with --smoke on a CPU): about 110 processes start, each forked from a server that
has imported torch (common.measure.zygote) and paying CUDA's start-up itself; their timings mean
nothing, they are not the point. The tests target runs verbose and with fresh children (no fork
server to warm), so that its log has its first line within seconds. One line per target as it
ends: ok, or what failed with the last line it printed and its log. Their reports go to
reports/results/gpu-check/ (not tracked), never over the committed reports. Without CUDA it runs
only with --smoke (the CPU sizes, for tests).

Every target at once does not fit one short stretch of GPU (about 110 processes, each paying CUDA's
start): a target that passed is kept in OUT/passed.json with the commit and the device, and the next
`make gpu-check` there runs only the others (`--again`: all of them), so that sittings add up to
every target once.
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from common import catalog
from common.analysis.results import atomic_write_text
from common.cli import OneLineParser, pick, positive_int
from common.env import REPO_ROOT, git_commit
from common.errors import CookbookError, exit_with
from common.runners import launch

# the tests whose code paths differ on a GPU: CUDA-only tests, the GPU paths, the GPU trace readers
GPU_TESTS = ("tests/test_techniques.py::test_a_captured_step_trains_like_the_eager_one", "tests/test_gpu_paths.py",
             "tests/test_hta.py", "tests/test_env.py",
             "tests/test_doctor.py::test_on_a_gpu_the_resnet18_baseline_is_headlined_as_make_diagnose_does")
FEW_STEPS = ["--steps", "20", "--warmup", "3", "--min-time", "0"]  # small sizes on a GPU: seconds a run
DOCTOR_FEW = ["--warmup", "3", "--steps", "10", "--time", "5", "--profile-steps", "2"]


NOT_APPLICABLE = "not applicable on "  # what a recipe, a sweep or a ladder rung prints where the GPU lacks it
AA_SECONDS = 120  # the A/A's share of the budget at most: its 6 processes (12 s each on an H200)
TRY_BUDGET = 90  # the doctor's --try on a baseline, within the check's budget
GRACE_S = 5  # a timed-out target's processes get this long after SIGTERM, then SIGKILL
RUNNING = set()  # the targets' processes now running (Popen), each the leader of its own process group


@dataclass
class Target:
    name: str
    cmd: list[str]
    alone: bool = False  # runs before the others, with the machine to itself (a timing that means something)
    tells: str | None = None  # the last line of its output that holds this is shown on its ok line
    env: dict | None = None  # variables for its process


def targets(smoke: bool, out: Path) -> list[Target]:
    """What `make gpu-check` runs, in order: the A/A alone, then the cheap and the basic first."""
    size = ["--smoke"] if smoke else []
    tail = [] if smoke else ["--", *FEW_STEPS]
    common = ["--rounds", "1", "--reports-dir", str(out), *size]
    # the noise floor at the recipes' real sizes (smoke: two rounds, an interval), into reports/results
    rounds = ["--rounds", "2" if smoke else "3"]
    found = [Target("aa", ["-m", "common.runners.compare", "amp", "--aa", "--workloads", "churn", *rounds, *size,
                           *(["--reports-dir", str(out)] if smoke else [])], alone=True, tells="A/A: ")]
    # verbose: a line per test as it passes; on a GPU its children start fresh (a few: no fork server to warm)
    found += [Target("tests", ["-m", "pytest", "-v", "-x", "-p", "no:cacheprovider", *GPU_TESTS],
                     env=None if smoke else {"COOKBOOK_ZYGOTE": "0"})]
    # a technique this GPU lacks is said on the target's line ("not applicable on Tesla T4 (sm_75): no TF32")
    # a served recipe's twins are servers (common.runners.serve): no script flags, a shorter load per rate
    found += [Target(f"recipe-{r}", ["-m", "common.runners.compare", r, *common,
                                     *((["--duration-s", "2"] if not smoke else []) if catalog.served(r) else tail)],
                     tells=NOT_APPLICABLE) for r in catalog.available()]
    for r in catalog.swept():
        values = catalog.spec(r).sweep.values["smoke" if smoke else "cuda"]
        points = ",".join(str(v) for v in dict.fromkeys([values[0], values[-1]]))  # both ends of the range
        found.append(Target(f"sweep-{r}", ["-m", "common.runners.sweep", r, "--values", points, *common, *tail],
                            tells=NOT_APPLICABLE))
    found.append(Target("ladder", ["-m", "common.runners.climb", *common, *tail], tells=NOT_APPLICABLE))
    found += [Target(f"diagnose-{w}", ["-m", "common.runners.diagnose", w, "--reports-dir", str(out), *size, *tail])
              for w in ("churn", "resnet18")]
    # the doctor on both baselines as plain scripts: its CUDA events, NVML and HTA on a user's script
    found += [Target(f"doctor-{w}", ["-m", "common.runners.doctor", f"baselines/{script}.py", "--reports-dir", str(out),
                                     *DOCTOR_FEW, *(["--", *size] if size else [])])
              for w, script in (("churn", "churn_mlp"), ("resnet18", "resnet18_cifar10"))]
    # the doctor's --try on a baseline: its fixes applied from outside and timed (the GPU-only ones too)
    script = "baselines/churn_mlp.py" if smoke else "baselines/resnet18_cifar10.py"
    found.append(Target("doctor-try", ["-m", "common.runners.doctor", script, "--reports-dir", str(out), *DOCTOR_FEW,
                                       "--try", "--try-budget", str(TRY_BUDGET), *(["--", *size] if size else [])],
                         tells=NOT_APPLICABLE))
    if not smoke and shutil.which("ncu"):  # CUDA kernels, where Nsight Compute is installed: one step, replayed
        found.append(Target("ncu-amp", ["-m", "common.runners.ncu", "amp", "--workloads", "resnet18",
                                        "--reports-dir", str(out), "--", "--warmup", "3"]))
    return found


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _stop(proc: subprocess.Popen, grace: float = GRACE_S) -> tuple[str, str]:
    """End a target's whole process group (its recipe processes, torchrun ranks, loader workers, which
    would otherwise go on holding the GPU) and what left it (launch.stop_group). Returns what it printed."""
    try:
        return launch.stop_group(proc, grace, lambda seconds: proc.communicate(timeout=seconds))
    except subprocess.TimeoutExpired as e:
        said = e
    # a process outside the group (torchrun starts each rank in its own session) still holds the pipes:
    # the output so far
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return (said.stdout or b"").decode(errors="replace"), (said.stderr or b"").decode(errors="replace")


def run(target: Target, log: Path, timeout: float) -> tuple[bool, str]:
    """(ok, what to say) for one target, its output in `log`."""
    t0 = time.perf_counter()
    # its own session: on a timeout the whole group goes, not just the process started here
    proc = subprocess.Popen([sys.executable, *target.cmd], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(target.env or {})},
                            start_new_session=True)
    RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        stdout, stderr = _stop(proc)
        code = None
    RUNNING.discard(proc)  # not on Ctrl-C: main() ends the group then
    out = stdout + stderr
    log.write_text(out)
    took = time.perf_counter() - t0
    if code == 0:
        told = [line for line in out.splitlines() if target.tells and target.tells in line]
        return True, f"ok      {target.name:<26} {took:6.1f} s" + (f"  {told[-1]}" if told else "")
    why = f"timed out after {timeout:.0f} s" if code is None else f"exit {code}"
    return False, f"FAILED  {target.name:<26} {took:6.1f} s  {why}: {last_line(out)} (log: {log})"


def passed_before(out: Path, key: dict) -> list[str]:
    """The targets an earlier sitting passed with this commit on this device (none after a change)."""
    try:
        kept = json.loads((out / "passed.json").read_text())
    except (OSError, ValueError):
        return []
    return kept.get("passed", []) if {k: kept.get(k) for k in key} == key and not key["commit"].endswith("-dirty") \
        else []


def keep_passed(out: Path, key: dict, passed: list[str]) -> None:
    atomic_write_text(out / "passed.json", json.dumps({**key, "passed": sorted(set(passed))}, indent=1) + "\n")


def default_jobs(smoke: bool) -> int:
    """On a GPU one target at a time: none shares it; on a CPU (--smoke) four."""
    return 4 if smoke else 1


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.gpucheck", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=positive_int, default=480, metavar="SECONDS",
                   help="the whole check's time (default 480: one 10-minute call on a lent GPU, with room)")
    p.add_argument("--jobs", type=positive_int, help="targets at a time (default: 1 on a GPU, 4 with --smoke)")
    p.add_argument("--only", help="comma-separated target names (see --list)")
    p.add_argument("--smoke", action="store_true", help="CPU sizes: how the tests check this without a GPU")
    p.add_argument("--list", action="store_true", help="print the targets and exit")
    p.add_argument("--again", action="store_true",
                   help="run every target, also those an earlier sitting passed with this commit on this device")
    p.add_argument("--out", default=str(REPO_ROOT / "reports" / "results" / "gpu-check"), metavar="DIR",
                   type=lambda d: str(Path(d).absolute()), help="reports and logs (default reports/results/gpu-check)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    try:
        if not args.smoke and not launch.cuda_available():
            raise CookbookError("no CUDA device here: make gpu-check is for a GPU machine "
                                "(ARGS='--smoke' runs the same targets at CPU sizes)")
        chosen = targets(args.smoke, out)
        wanted = pick("--only", args.only, [t.name for t in chosen], "target")
        chosen = [t for t in chosen if t.name in wanted]
    except CookbookError as e:
        exit_with(e, "common.runners.gpucheck")
    if args.list:
        print("\n".join(t.name for t in chosen))
        return 0
    (out / "logs").mkdir(parents=True, exist_ok=True)
    args.jobs = args.jobs or default_jobs(args.smoke)
    deadline = time.perf_counter() + args.budget
    profile = launch.device_profile(not args.smoke)
    key = {"commit": git_commit(), "device": profile.name}
    passed = [] if args.again else passed_before(out, key)
    done = [t.name for t in chosen if t.name in passed]
    chosen = [t for t in chosen if t.name not in passed]
    print(f"gpu-check: device profile: {profile.summary()}", flush=True)
    if done:
        print(f"gpu-check: {len(done)} target(s) passed in an earlier sitting at {key['commit']} on this device "
              f"(--again runs them too): {', '.join(done)}", flush=True)
    print(f"gpu-check: {len(chosen)} targets, {args.jobs} at a time, within {args.budget} s; reports and logs in "
          f"{out}", flush=True)

    def one(target: Target, most: float | None = None) -> tuple[bool, str]:
        left = deadline - time.perf_counter()  # a hang ends with the budget, not after it
        if left < 5:
            return False, f"NOT RUN {target.name}: the {args.budget} s budget is spent"
        return run(target, out / "logs" / f"{target.name}.log", min(left, most or left))

    failed = []

    def report(ok: bool, line: str, target: Target) -> None:
        print(line, flush=True)
        if not ok:
            failed.append(target.name)
        elif not key["commit"].endswith("-dirty"):  # kept as it ends: a sitting cut off keeps what passed
            passed.append(target.name)
            keep_passed(out, key, passed)

    # the targets run in their own sessions, out of reach of Ctrl-C or a kill of the check's process group:
    # either ends them here (SIGTERM read as Ctrl-C)
    # every target's children forked warm from one server (the tour's), which never touches CUDA
    with launch.warm_server(not args.smoke, compiles=True):
        before = signal.signal(signal.SIGTERM, signal.default_int_handler)
        pool = ThreadPoolExecutor(args.jobs)
        try:
            for target in (t for t in chosen if t.alone):
                report(*one(target, AA_SECONDS), target)
            futures = {pool.submit(one, t): t for t in chosen if not t.alone}
            for future in as_completed(futures):
                report(*future.result(), futures[future])
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(RUNNING):  # SIGTERM: torchrun passes it on to its ranks
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            raise
        finally:
            pool.shutdown()
            signal.signal(signal.SIGTERM, before)
    print(f"gpu-check: {len(chosen) - len(failed)} of {len(chosen)} ok" + (f"; failed: {', '.join(sorted(failed))}"
                                                                          if failed else "")
          + (f" ({len(done)} more passed earlier)" if done else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
