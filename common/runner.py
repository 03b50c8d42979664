"""The one way to run a harness script in a child process: `make recipe-*`, `make ladder`,
`make diagnose-*` and `make sweep-*` all go through here.

- the flags every runner shares (`--device`, one `--data` grammar, `--smoke`, `--reports-dir`,
  `--cpus`, `--rounds`), checked once;
- `launch()`: one script in its own process, pinned to the runner's CPU set, its output in a log
  beside its result, and an `Outcome`: a result, an out-of-memory at a stage, or a failure with
  its log tail;
- `alternating()`: the order of a round (forward in odd rounds, backward in even ones), so that
  drift over time hits every variant alike.
"""
import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common import env
from common.cli import positive_int
from common.errors import EXIT_OOM, CookbookError
from common.presets import WORKLOADS
from common.results import Failure, RunResult, read_result

LOG_TAIL = 15  # lines of a failed run's log shown in the terminal and the report


def add_flags(p: argparse.ArgumentParser, rounds_help: str | None = None) -> None:
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", action="append", default=[], metavar="synthetic|WORKLOAD=PATH",
                   help="data for the scripts: 'synthetic' for all, or churn=FILE.csv / resnet18=CIFAR_ROOT "
                        "(repeatable); default: the real source, else a synthetic stand-in")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a quick CPU check of the whole pipeline")
    p.add_argument("--cpus", metavar="LIST", help="pin every child process to these cores, e.g. 1-15 or 0,2,4 "
                   "(default: all usable cores, less core 0 where there are 4 or more)")
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"), help="where reports go (default reports/)")
    if rounds_help:
        p.add_argument("--rounds", type=positive_int, metavar="N", help=rounds_help)


def data_flags(values: list[str], workloads) -> dict[str, list[str]]:
    """`--data` values -> the script flags per workload. 'synthetic' applies to every workload;
    WORKLOAD=PATH to that one only, so a Telco CSV never reaches ResNet-18."""
    flags = {w: [] for w in workloads}
    for value in values:
        if value == "synthetic":
            for w in workloads:
                flags[w] = ["--data", "synthetic"]
            continue
        workload, sep, path = value.partition("=")
        if not sep or workload not in WORKLOADS or not path:
            raise CookbookError(f"--data {value!r}: use 'synthetic' or WORKLOAD=PATH with WORKLOAD one of "
                                f"{', '.join(WORKLOADS)}")
        if workload in flags:
            flags[workload] = ["--data", path]
    return flags


def use_cuda(device: str) -> bool:
    if device == "cuda" and not torch.cuda.is_available():
        raise CookbookError("--device cuda: CUDA is not available here; use --device cpu or --device auto")
    return device != "cpu" and torch.cuda.is_available()


def cpu_set(spec: str | None) -> list[int]:
    """The cores every child is pinned to. By default all usable ones, less core 0 where there are
    4 or more (it takes the runner, interrupts and the rest of the machine)."""
    usable = env.cpu_set()
    if spec is None:
        return usable[1:] if len(usable) >= 4 else usable
    chosen = set()
    try:
        for part in spec.split(","):
            a, _, b = part.partition("-")
            chosen.update(range(int(a), int(b or a) + 1))
    except ValueError:
        raise CookbookError(f"--cpus {spec!r}: use a list like 1-15 or 0,2,4") from None
    if not chosen or not chosen <= set(usable):
        raise CookbookError(f"--cpus {spec!r}: this process may use cores {env.cpu_ranges(usable)} only")
    return sorted(chosen)


def output_folder(reports_dir, *parts) -> Path:
    """reports/results/<parts>/<run id>: one folder per invocation, so two runs at once never read
    or overwrite each other's files."""
    folder = Path(reports_dir) / "results" / Path(*parts) / env.run_id()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({e.strerror}); "
                            "choose a writable folder") from None
    return folder


def alternating(items, round_no: int) -> list:
    """Round 1 forward, round 2 backward, ...: who goes first alternates, so drift hits all alike."""
    items = list(items)
    return items if round_no % 2 else items[::-1]


@dataclass
class Outcome:
    kind: str  # "ok", "oom" or "failed"
    result: RunResult | None
    seconds: float
    log: Path
    returncode: int
    tail: list[str]

    def describe(self) -> str:
        """The end of a progress line: how the run ended, and in what time."""
        if self.kind == "failed":
            return f"FAILED (exit {self.returncode}) after {self.seconds:.1f} s"
        if self.kind == "oom":
            return f"out of memory at batch {self.result.oom.batch_size} after {self.seconds:.1f} s"
        s = self.result.timing.summary
        return f"{self.seconds:.1f} s, median {s.median_ms:.3f} ms over {s.n} steps"

    def failure(self, what: str, round_no: int) -> Failure:
        return Failure(what=what, round=round_no, returncode=self.returncode, log=str(self.log), tail=self.tail,
                       seconds=self.seconds)


def _pin(cpus):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus and hasattr(os, "sched_setaffinity") else None


def launch(target: list[str], flags: list[str], out: Path, cpus=None, echo=None, rerun="make recipe-<name>") -> Outcome:
    """Run `python <target> --out OUT <flags>` in its own process (target: ["-m", "module"] or a path),
    pinned to `cpus`, its output in OUT.log; echo(line) sees each line as it comes when given."""
    out = Path(out)
    log = out.with_suffix(".log")
    cmd = [sys.executable, *target, "--out", str(out), *flags]
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1",
                 "PYTHONPATH": os.pathsep.join(p for p in (str(env.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        if echo is None:
            proc = subprocess.run(cmd, cwd=env.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, env=child_env,
                                  preexec_fn=_pin(cpus))
        else:
            proc = subprocess.Popen(cmd, cwd=env.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=child_env, preexec_fn=_pin(cpus))
            try:
                for line in proc.stdout:  # progress as it happens, and a copy in the log
                    f.write(line)
                    echo(line)
            finally:  # also on Ctrl-C or a kill: the child stops with its runner
                if proc.poll() is None and sys.exc_info()[0] is not None:
                    proc.terminate()
                proc.stdout.close()
                proc.wait()
    seconds = time.perf_counter() - t0
    if proc.returncode in (0, EXIT_OOM) and out.exists():
        result = read_result(out, RunResult, rerun)
        return Outcome(result.status, result, seconds, log, proc.returncode, [])
    tail = log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL:]
    return Outcome("failed", None, seconds, log, proc.returncode, tail)


def progress(done: int, total: int, started: float, what: str) -> str:
    """'[3/12, ~2 min left] churn fast round 2 ...': the run under way, how many are left, and an
    estimate of the time left from the pace so far."""
    left = ""
    if done > 1:
        per_run = (time.perf_counter() - started) / (done - 1)
        remaining = per_run * (total - done + 1)
        left = f", ~{remaining / 60:.0f} min left" if remaining >= 90 else f", ~{remaining:.0f} s left"
    return f"[{done}/{total}{left}] {what} ..."
