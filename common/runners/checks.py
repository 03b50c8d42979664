"""`make gpu-check` (`make tour ARGS=--check`): every target once, at small sizes, the first thing to run
on a GPU. This module is its plan and how one target runs; the tour's sitting runs them (tour.check_sitting).

First, alone on the machine, an A/A at the real sizes in 3 rounds (the tour's): amp's slow script of the
noise-floor workload against itself (compare --aa), whose interval ("A/A: 1.00x, 0.98-1.02") is this
machine's noise floor; it lands in reports/results/amp/aa/, where every recipe report rendered there
cites it. Then the GPU-relevant tests, every recipe, every sweep (both ends of its range), the ladders,
every workload's diagnosis, the doctor on every baseline, the doctor's --try on a baseline (every fix
applied from outside and timed), the kernels of amp's main pair under ncu (where it is installed), and
(inside the checkpointing recipe) the memory-budget search, each once with few steps, one target at a
time on a GPU (4 with --smoke on a CPU): about 110 processes start, each forked from a server that has
imported torch (common.measure.zygote) and paying CUDA's start-up itself; their timings mean nothing,
they are not the point. The tests target runs verbose and with fresh children (no fork server to warm),
so that its log has its first line within seconds. One line per target as it ends: ok, or what failed
with the last line it printed and its log.
"""
import contextlib
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
from common.env import REPO_ROOT
from common.runners import launch
from common.workload_specs import noise_floor_workload, workload_names, workload_spec

# the tests whose code paths differ on a GPU: CUDA-only tests, the GPU paths, the GPU trace readers
GPU_TESTS = ("tests/unit/test_techniques.py::test_a_captured_step_trains_like_the_eager_one",
             "tests/integration/test_gpu_paths.py", "tests/unit/test_hta.py", "tests/integration/test_env.py",
             "tests/integration/test_doctor.py::test_on_a_gpu_the_image_baseline_is_headlined_as_make_diagnose_does")
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
    found = [Target("aa", ["-m", "common.runners.compare", "amp", "--aa", "--workloads", noise_floor_workload(),
                           *rounds, *size, *(["--reports-dir", str(out)] if smoke else [])], alone=True, tells="A/A: ")]
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
    baselines = {w: workload_spec(w).baseline for w in workload_names() if workload_spec(w).baseline}
    found += [Target(f"diagnose-{w}", ["-m", "common.runners.diagnose", w, "--reports-dir", str(out), *size, *tail])
              for w in baselines]
    # the doctor on every baseline as a plain script: its CUDA events, NVML and HTA on a user's script
    path = lambda w: baselines[w].replace(".", "/") + ".py"  # noqa: E731
    found += [Target(f"doctor-{w}", ["-m", "common.runners.doctor", path(w), "--reports-dir", str(out),
                                     *DOCTOR_FEW, *(["--", *size] if size else [])])
              for w in baselines]
    # the doctor's --try on a baseline: its fixes applied from outside and timed (the GPU-only ones too); with
    # --smoke the cheapest, on a GPU the one of amp's main pair, where the fixes pay
    tried = noise_floor_workload() if smoke else catalog.workload_of(catalog.main_pair("amp"))
    script = path(tried if tried in baselines else next(iter(baselines)))
    found.append(Target("doctor-try", ["-m", "common.runners.doctor", script, "--reports-dir", str(out), *DOCTOR_FEW,
                                       "--try", "--try-budget", str(TRY_BUDGET), *(["--", *size] if size else [])],
                         tells=NOT_APPLICABLE))
    if not smoke and shutil.which("ncu"):  # CUDA kernels, where Nsight Compute is installed: one step, replayed
        found.append(Target("ncu-amp", ["-m", "common.runners.ncu", "amp", "--workloads", catalog.main_pair("amp"),
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


def run(target: Target, log: Path, timeout: float, track=None) -> tuple[bool, str]:
    """(ok, what to say) for one target, its output in `log`; `track` (the tour's running groups) holds its
    process group while it runs."""
    t0 = time.perf_counter()
    # its own session: on a timeout the whole group goes, not just the process started here
    proc = subprocess.Popen([sys.executable, *target.cmd], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(target.env or {})},
                            start_new_session=True)
    RUNNING.add(proc)
    if track is not None:
        track.add(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        stdout, stderr = _stop(proc)
        code = None
    RUNNING.discard(proc)  # not on Ctrl-C: run_all ends the group then
    if track is not None:
        track.discard(proc.pid)
    out = stdout + stderr
    log.write_text(out)
    took = time.perf_counter() - t0
    if code == 0:
        told = [line for line in out.splitlines() if target.tells and target.tells in line]
        return True, f"ok      {target.name:<26} {took:6.1f} s" + (f"  {told[-1]}" if told else "")
    why = f"timed out after {timeout:.0f} s" if code is None else f"exit {code}"
    return False, f"FAILED  {target.name:<26} {took:6.1f} s  {why}: {last_line(out)} (log: {log})"


def default_jobs(smoke: bool) -> int:
    """On a GPU one target at a time: none shares it; on a CPU (--smoke) four."""
    return 4 if smoke else 1


def run_all(chosen: list[Target], jobs: int, deadline: float, logs: Path, said, budget_s: int,
            track=None) -> list[str]:
    """Every chosen target once: those that run alone first, then `jobs` at a time, each within what is
    left before `deadline` (time.perf_counter's); said(ok, line, target) as each ends. The names that failed."""
    logs.mkdir(parents=True, exist_ok=True)
    failed = []

    def one(target: Target, most: float | None = None) -> tuple[bool, str]:
        left = deadline - time.perf_counter()  # a hang ends with the budget, not after it
        if left < 5:
            return False, f"NOT RUN {target.name}: the {budget_s} s budget is spent"
        return run(target, logs / f"{target.name}.log", min(left, most or left), track)

    def report(ok: bool, line: str, target: Target) -> None:
        if not ok:
            failed.append(target.name)
        said(ok, line, target)

    # the targets run in their own sessions, out of reach of Ctrl-C or a kill of the sitting's process group:
    # either ends them here (SIGTERM read as Ctrl-C)
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    pool = ThreadPoolExecutor(jobs)
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
    return failed
