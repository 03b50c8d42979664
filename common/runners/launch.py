"""The one way to run a harness script in a child process: `make recipe-*`, `make ladder`,
`make diagnose-*` and `make sweep-*` all go through here.

- the flags every runner shares (`--device`, one `--data` grammar, `--smoke`, `--reports-dir`,
  `--cpus`, `--rounds`), checked once and before anything starts or is written: a `--data` path is
  read by its loader's own check, and the results folder is checked for writing, then created only
  once every input has passed;
- `child()`: one script in its own process, pinned to the runner's CPU set, its output in a log
  beside its result, and an `Outcome`: a result, an out-of-memory at a stage, or a failure with
  its log tail;
- `alternating()`: the order of a round (forward in odd rounds, backward in even ones), so that
  drift over time hits every variant alike.
"""
import argparse
import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from common import env, startup
from common.analysis import device as device_rules
from common.analysis.device import DeviceProfile
from common.analysis.results import read_result, write_result
from common.analysis.results_compare import Failure
from common.analysis.results_run import RunResult
from common.cli import positive_int
from common.errors import EXIT_OOM, CookbookError
from common.workload_specs import resolve, workload_names, workload_spec

LOG_TAIL = 15  # lines of a failed run's log shown in the terminal and the report
WARM_START_S = 120  # the fork server's start, at most: past it each child starts as a fresh interpreter


def add_flags(p: argparse.ArgumentParser, rounds_help: str | None = None) -> None:
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", action="append", default=[], metavar="synthetic|WORKLOAD=PATH",
                   help="data for the scripts: 'synthetic' for all, or "
                        + " / ".join(f"{w}={workload_spec(w).data_help}" for w in workload_names())
                        + " (repeatable); default: the real source, else a synthetic stand-in")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a quick CPU check of the whole pipeline")
    p.add_argument("--cpus", metavar="LIST", help="pin every child process to these cores, e.g. 1-15 or 0,2,4 "
                   "(default: all usable cores, less core 0 where there are 4 or more)")
    # absolute: the children run from the repo root, wherever the runner was started
    p.add_argument("--reports-dir", default=str(env.LOCAL_REPORTS), type=lambda d: str(Path(d).absolute()),
                   help="where reports go (default reports/local/, untracked)")
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
        if not sep or workload not in workload_names() or not path:
            raise CookbookError(f"--data {value!r}: use 'synthetic' or WORKLOAD=PATH with WORKLOAD one of "
                                f"{', '.join(workload_names())}")
        if workload in flags:  # absolute: the scripts run from the repository root
            flags[workload] = ["--data", path if path == "synthetic" else str(Path(path).expanduser().absolute())]
    return flags


def check_data(values: list[str], workloads) -> None:
    """Every `--data WORKLOAD=PATH` among `workloads` read as that workload's loader reads it (its spec's
    check), so that a bad path is one line before any run."""
    for workload, flags in data_flags(values, workloads).items():
        if not flags or flags[1] == "synthetic":
            continue
        resolve(workload_spec(workload).check)(Path(flags[1]))


def device_seen() -> dict:
    """What the sitting's runner probed once and passed down (env.DEVICE_SEEN_ENV), else nothing."""
    try:
        return json.loads(os.environ.get(env.DEVICE_SEEN_ENV) or "{}")
    except ValueError:
        return {}


@cache
def cuda_device_count() -> int:
    """The GPUs a child process sees: the runner itself never imports torch nor holds a CUDA context."""
    if "gpus" in device_seen():
        return int(device_seen()["gpus"])
    probe = ("import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
             "print(json.dumps({'gpus': n, 'torch': torch.__version__, 'cuda': torch.version.cuda, "
             "'capability': list(torch.cuda.get_device_capability(0)) if n else None, "
             "'name': torch.cuda.get_device_name(0) if n else None, 'archs': torch.cuda.get_arch_list()}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=env.REPO_ROOT, capture_output=True, text=True).stdout
    try:
        said = json.loads((out.strip().splitlines() or ["{}"])[-1])
    except ValueError:
        return 0
    count = int(said.get("gpus") or 0)
    if not count and said.get("torch"):  # before anything runs: a GPU torch cannot see is said, not skipped silently
        why = startup.unseen(said["torch"], said["cuda"])
        if why:
            print(f"warning: {why}", file=sys.stderr, flush=True)
    if count:  # a GPU torch sees but has no kernels for stops here, not at the first op of every run
        why = startup.no_kernels(said["torch"], said["cuda"], tuple(said["capability"]), said["name"], said["archs"])
        if why:
            raise CookbookError(why)
    return count


def cuda_available() -> bool:
    return cuda_device_count() > 0


def use_cuda(device: str) -> bool:
    if device == "cpu":
        return False
    if device == "cuda" and not cuda_available():
        raise CookbookError("--device cuda: CUDA is not available here; use --device cpu or --device auto")
    return cuda_available()


@cache
def device_profile(cuda: bool) -> DeviceProfile:
    """What the children's device can do: a simulated profile (env.DEVICE_PROFILE_ENV) or a CPU's
    without torch; a GPU's from a child process (the runner holds no CUDA context)."""
    name = os.environ.get(env.DEVICE_PROFILE_ENV)
    if name:
        return device_rules.simulated(name)
    if not cuda:
        return device_rules.cpu(env.cpu_model())
    if device_seen().get("profile"):
        return DeviceProfile.from_json(device_seen()["profile"])
    out = subprocess.run([sys.executable, "-m", "common.measure.device", "--device", "cuda"], cwd=env.REPO_ROOT,
                         capture_output=True, text=True)
    try:
        return DeviceProfile.from_json(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        raise CookbookError("could not read this GPU's profile (python -m common.measure.device --device cuda): "
                            + (out.stderr.strip().splitlines() or ["no output"])[-1]) from None


def ensure_ceiling(cuda: bool) -> None:
    """The matmul ceiling (for MFU), measured in a child process unless cached."""
    if cuda and not device_seen().get("ceiling"):
        subprocess.run([sys.executable, "-m", "common.measure.ceiling", "--if-missing"], cwd=env.REPO_ROOT, check=False)


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
            first, last = int(a), int(b or a)
            if last < first:
                raise ValueError(part)
            chosen.update(range(first, last + 1))
    except ValueError:
        raise CookbookError(f"--cpus {spec!r}: use a list like 1-15 or 0,2,4") from None
    if not chosen or not chosen <= set(usable):
        raise CookbookError(f"--cpus {spec!r}: this process may use cores {env.cpu_ranges(usable)} only")
    return sorted(chosen)


def output_folder(reports_dir, *parts) -> Path:
    """reports/results/<parts>/<run id>: one folder per invocation, so two runs at once never read
    or overwrite each other's files. Only checked here, nothing created: make_folder() creates it
    once every other input has passed."""
    folder = Path(reports_dir) / "results" / Path(*parts) / env.run_id()
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:  # the deepest part that exists
        existing = existing.parent
    why = ("a file is in the way" if not existing.is_dir()
           else None if os.access(existing, os.W_OK | os.X_OK) else "permission denied")
    if why:
        raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({why} at {existing}); "
                            "choose a writable folder")
    return folder


def make_folder(folder: Path, reports_dir) -> Path:
    """Create a folder output_folder() checked (it may still fail: a disk full, a race)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({e.strerror}); "
                            "choose a writable folder") from None
    return Path(folder)


def alternating(items, round_no: int) -> list:
    """Round 1 forward, round 2 backward, ...: who goes first alternates, so drift hits all alike."""
    items = list(items)
    return items if round_no % 2 else items[::-1]


@dataclass
class Outcome:
    kind: str  # "ok", "oom", "failed", or "cut" (stopped at its deadline: a budget ended)
    result: RunResult | None
    seconds: float
    log: Path
    returncode: int
    tail: list[str]

    def describe(self) -> str:
        """The end of a progress line: how the run ended, and in what time."""
        if self.kind == "failed":
            return f"FAILED (exit {self.returncode}) after {self.seconds:.1f} s"
        if self.kind == "cut":
            return f"cut after {self.seconds:.1f} s: the budget ended"
        if self.kind == "oom":
            return f"out of memory at batch {self.result.oom.batch_size} after {self.seconds:.1f} s"
        s = self.result.timing.summary
        bursty = f"; {t.bursts.words.split(':')[0]}" if (t := self.result.timing).bursts else ""
        return f"{self.seconds:.1f} s, {s.mean_ms:.3f} ms per step over {s.n} steps{bursty}"

    def failure(self, what: str, round_no: int) -> Failure:
        return Failure(what=what, round=round_no, returncode=self.returncode, log=str(self.log), tail=self.tail,
                       seconds=self.seconds)


def _pin(cpus):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus and hasattr(os, "sched_setaffinity") else None


def echo(line: str) -> None:
    """A child's output as it comes, indented, less the profiler's and the CUDA runtime's chatter."""
    if not line.startswith(("USDT", "[W", "ERROR:")):
        for part in readable_lines(line):
            print("  " + part, flush=True)


def readable_lines(line: str) -> list[str]:
    """A line as a reader should see it: a progress bar redrawn with carriage returns (tqdm) as its
    last state, and the doctor's own words, written after a bar that ended no line, on their own."""
    parts = [p.rstrip() for p in re.split(r"\r|(?=doctor: )", line.rstrip("\n")) if p.strip()]
    ours = [p for p in parts if p.startswith("doctor: ")]
    return [p for p in parts if not p.startswith("doctor: ")][-1:] + ours or [""]


def child(target: list[str], flags: list[str], out: Path, cpus=None, echo=None, rerun="make recipe-<name>",
          read=RunResult, cwd=None, under=(), extra_env=None, timeout: float | None = None) -> Outcome:
    """Run `python <target> --out OUT <flags>` in its own process (target: ["-m", "module"] or a path),
    pinned to `cpus`, its output in OUT.log; echo(line) sees each line as it comes when given.
    read: the record OUT holds (None: the caller reads it); cwd: the child's folder (the repo's root);
    under: a tool that runs python (["ncu", ...flags]); extra_env: variables for the child; timeout:
    seconds it may take (without echo), after which it is stopped and its outcome is "cut"."""
    return start_child(target, flags, out, cpus, echo, rerun, read, cwd, under, extra_env, timeout).outcome()


def start_child(target: list[str], flags: list[str], out: Path, cpus=None, echo=None, rerun="make recipe-<name>",
                read=RunResult, cwd=None, under=(), extra_env=None, timeout: float | None = None,
                slot=None) -> "Started":
    """child(), started: its outcome() waits for it. slot: a pipelined child's gate and the cores it
    prepares on (common.runners.pipeline); it was forked, or it would not be pipelined."""
    out = Path(out)
    log = out.with_suffix(".log")
    cmd = [*under, sys.executable, *target, "--out", str(out), *flags]
    child_env = {**os.environ, **(extra_env or {}), "PYTHONUNBUFFERED": "1", "PYTHONPATH": _pythonpath()}
    if slot is not None:
        child_env[env.GATE_ENV] = slot.gate.to_env()
    f = open(log, "w")
    try:
        # a child with a deadline leads its own process group, so that a cut ends what it started too
        # (DataLoader workers, a multiprocessing launch), not itself alone
        proc = _start(cmd, target, under, Path(cwd or env.REPO_ROOT), child_env, cpus, None if echo else f,
                      session=timeout is not None, prepare_on=slot.cores if slot is not None else None)
    except BaseException:
        f.close()
        raise
    return Started(proc, f, out, log, time.perf_counter(), read, rerun, echo, timeout,
                   slot.gate.release if slot is not None else None)


@dataclass
class Started:
    """A child under way: outcome() waits for it and reads what it wrote; cancel() stops it unread."""
    proc: object
    file: object  # its log, open for writing
    out: Path
    log: Path
    t0: float
    read: object
    rerun: str
    echo: object
    timeout: float | None
    release: str | None  # its gate's release file, created once it ends (whoever waits on it goes on)

    def outcome(self) -> Outcome:
        proc, f, out, read = self.proc, self.file, self.out, self.read
        cut = False
        try:
            if self.echo is not None:
                for line in proc.stdout:  # progress as it happens, and a copy in the log
                    f.write(line)
                    self.echo(line)
            try:
                proc.wait(timeout=self.timeout if self.echo is None else None)
            except subprocess.TimeoutExpired:
                cut = True  # stopped below, as on Ctrl-C, with a short grace: a budget is a budget
        finally:  # also on Ctrl-C or a kill: the child stops with its runner
            self._stop(5 if cut else 30)
        seconds, ended = time.perf_counter() - self.t0, time.time()
        if cut:
            return Outcome("cut", None, seconds, self.log, proc.returncode or 0,
                           [f"cut after {seconds:.0f} s: the budget ended"])
        if proc.returncode == 0 and out.exists() and read is None:
            return Outcome("ok", None, seconds, self.log, 0, [])
        if proc.returncode in (0, EXIT_OOM) and out.exists() and read is not None:
            result = read_result(out, read, self.rerun)
            if getattr(result, "timeline", None) and result.started:  # the process's end, which it cannot see
                result.timeline["exit"] = round(max(0.0, ended - result.started), 4)
                write_result(out, result)
            return Outcome(result.status, result, seconds, self.log, proc.returncode, [])
        tail = self.log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL:]
        return Outcome("failed", None, seconds, self.log, proc.returncode, tail)

    def cancel(self) -> None:
        """Stop it (a prepared child the rounds no longer need), its files removed."""
        self._stop(5)
        for path in (self.out, self.log):
            path.unlink(missing_ok=True)

    def _stop(self, grace: float) -> None:
        proc = self.proc
        try:
            group = self.timeout is not None and isinstance(proc, subprocess.Popen)
            if proc.poll() is None or group:
                _signal(proc, signal.SIGTERM, group)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
                _signal(proc, signal.SIGKILL, group)
            if proc.stdout is not None:
                proc.stdout.close()
        finally:
            self.file.close()
            if self.release is not None:  # it ended, however: the next child's gate opens
                with contextlib.suppress(OSError):
                    Path(self.release).touch()


def process(target: list[str], argv: list[str], log, extra_env=None, cpus=None):
    """A child that is not a measured run (a server, a build step): `python <target> <argv>` from the
    repository's root, leading its own session (a terminal's Ctrl-C reaches the runner alone), its
    output into `log` (None: a pipe in .stdout), pinned to `cpus` where given, forked from the
    suite's zygote where there is one. End it with end_process()."""
    child_env = {**os.environ, **(extra_env or {}), "PYTHONPATH": _pythonpath()}
    return _start([sys.executable, *target, *argv], target, (), env.REPO_ROOT, child_env, cpus, log, session=True)


@contextlib.contextmanager
def warm_server(cuda: bool, compiles: bool = False, wanted: bool = True):
    """Every child below forked from one server that has imported torch and the harness and never
    touched CUDA (common.measure.zygote): a child then starts in milliseconds, not the seconds of
    torch's import, and initialises CUDA itself. Not where one serves already (a tour's, the test
    suite's) or COOKBOOK_ZYGOTE=0 says so (each child a fresh interpreter; so does wanted=False).
    compiles: the children compile on a CPU, so Inductor's C++ backend is warmed once (~10 s). Yields
    the server's pid (it leads its own session), or None where this call started none."""
    if not wanted or os.environ.get(env.ZYGOTE_ENV):
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="cookbook-zygote-"))  # short: a socket's path has 107 bytes at most
    sock = folder / "socket"
    cmd = [sys.executable, "-m", "common.measure.zygote", "--socket", str(sock)]
    cmd += [] if compiles and not cuda else ["--no-cpu-inductor"]
    proc = subprocess.Popen(cmd, cwd=env.REPO_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": _pythonpath()})
    try:
        # it says "ready" once it has imported torch (seconds; a CPU's Inductor warm-up ~10 s more)
        if select.select([proc.stdout], [], [], WARM_START_S)[0] and proc.stdout.readline().strip() == "ready":
            os.environ[env.ZYGOTE_ENV] = str(sock)
        else:
            print("the fork server did not start: each child starts as a fresh interpreter", flush=True)
        yield proc.pid
    finally:
        os.environ.pop(env.ZYGOTE_ENV, None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            stop_group(proc, 5)
        shutil.rmtree(folder, ignore_errors=True)


def read_traces(comparisons: list[Path]) -> None:
    """The traces a tour's children left unread, read into their comparisons' evidence, in one child
    (common.measure.unread: torch's trace reading stays out of the runners)."""
    if not comparisons:
        return
    proc = process(["-m", "common.measure.unread"], [str(p) for p in comparisons], None)
    said = proc.stdout.read()
    if proc.wait() != 0:
        raise CookbookError("reading the traces failed (python -m common.measure.unread): "
                            + (said.strip().splitlines() or ["no output"])[-1])


def _pythonpath() -> str:
    """The repository first, then what the caller's PYTHONPATH holds (packages carried to a GPU image)."""
    return os.pathsep.join(p for p in (str(env.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)


def end_process(proc) -> int:
    """Kill a child process() started, and whatever it started in its session; its status."""
    if proc.poll() is None:
        _signal(proc, signal.SIGKILL, isinstance(proc, subprocess.Popen))
    return proc.wait()


def _signal(proc, sig, group: bool) -> None:
    """The child (and, where it leads its own session, everything in its process group)."""
    try:
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig) if isinstance(proc, subprocess.Popen) else os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def descendants(pid: int) -> list[int]:
    """Every process below pid, read from /proc (Linux; elsewhere none): the ones that left its
    process group included, as torchrun's ranks do (each starts in its own session)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def stop_group(proc, grace: float, wait=None):
    """End a child that leads its own process group: SIGTERM to the group, then SIGKILL to it and to any
    process below it that left the group (a torchrun rank, in its own session, which the group's signals
    miss and which a killed torchrun can no longer stop). wait(seconds) waits for the end (default
    proc.wait) and its value is returned; subprocess.TimeoutExpired if even SIGKILL left it running."""
    wait = wait or (lambda seconds: proc.wait(timeout=seconds))
    below = descendants(proc.pid)  # read first: once their parent is gone they are re-parented
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):  # every process in the group has ended
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            for pid in below:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        try:
            return wait(grace)
        except subprocess.TimeoutExpired as e:
            said = e
    raise said


def _start(cmd, target, under, cwd: Path, child_env: dict, cpus, log, session: bool = False, prepare_on=None):
    """The child as a Popen (its output into `log`, or a pipe to read when `log` is None), or, where
    the test suite runs a zygote (env.ZYGOTE_ENV), forked from it: the same program, without the
    seconds of torch's import."""
    zygote = os.environ.get(env.ZYGOTE_ENV)
    if zygote and not under and target[0] == "-m":
        if target[1] == "torch.distributed.run":  # torchrun forked too; each rank through a stand-in it starts
            at = cmd.index("-m", 3) + 1  # torchrun's own -m: the ranks' module
            cmd = [*cmd[:at], "common.measure.zygote_client", *cmd[at:]]
        try:
            return Forked(zygote, target[1], cmd[3:], cwd, child_env, cpus, log, prepare_on)
        except OSError:
            pass  # the zygote is gone: a plain process does the same
    return subprocess.Popen(cmd, cwd=cwd, stdout=log if log is not None else subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=child_env, preexec_fn=_pin(cpus),
                            start_new_session=session)


class Forked:
    """A child the test suite's zygote forked (common.measure.zygote), driven as a Popen is."""

    def __init__(self, path: str, module: str, argv: list[str], cwd: Path, child_env: dict, cpus, log,
                 prepare_on=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.returncode, self.stdout = None, None
        if log is None:
            read_end, fd = os.pipe()
            self.stdout = open(read_end, errors="replace")
        else:
            fd = log.fileno()
        request = {"module": module, "argv": argv, "cwd": str(cwd), "env": child_env, "cpus": list(cpus or []),
                   "prepare_on": list(prepare_on or [])}
        socket.send_fds(self.sock, [json.dumps(request).encode()], [fd])
        if log is None:
            os.close(fd)
        self.pid = int(self.sock.recv(64))

    def poll(self):
        if self.returncode is None:
            try:
                self.wait(timeout=0.001)
            except subprocess.TimeoutExpired:
                pass  # still running
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.sock.settimeout(timeout)
            try:
                said = self.sock.recv(64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout) from None
            self.returncode = int(said) if said else -signal.SIGKILL  # no status: it was killed
            self.sock.close()
        return self.returncode

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def _signal(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


def progress(done: int, total: int, started: float, what: str, most: int | None = None) -> str:
    """'[3/12, ~2 min left] churn fast round 2 ...': the run under way, how many there are, and an
    estimate of the time left from the pace so far. When more runs may follow than are planned
    (rounds added until an interval decides): '[3/12 planned, up to 40, ~2 min left as planned]', the
    estimate covering the planned runs only."""
    total = max(total, done)
    most = total if most is None else max(most, total)
    left = ""
    if done > 1:
        per_run = (time.perf_counter() - started) / (done - 1)
        remaining = per_run * (total - done + 1)
        left = f", ~{remaining / 60:.0f} min left" if remaining >= 90 else f", ~{remaining:.0f} s left"
    if most == total:
        return f"[{done}/{total}{left}] {what} ..."
    return f"[{done}/{total} planned, up to {most}{left + ' as planned' if left else ''}] {what} ..."


class Counter:
    """The progress counter of a runner with stages (a workload's rounds, a search's probes), each
    with the runs planned and the most it may take. It never shows a total below what is still to
    come: a stage that runs past its plan raises it, and settle() closes a stage at what it ran."""

    def __init__(self, stages: dict):
        self.planned = {k: p for k, (p, _) in stages.items()}
        self.most = {k: max(p, m) for k, (p, m) in stages.items()}
        self.done = {k: 0 for k in stages}
        self.started = time.perf_counter()

    def totals(self) -> tuple[int, int, int]:
        return sum(self.done.values()), sum(self.planned.values()), sum(self.most.values())

    def at_least(self, stage, runs: int) -> None:
        """The stage will run at least `runs` runs in all (a round that starts: both of its runs)."""
        self.done.setdefault(stage, 0)
        self.planned[stage] = max(self.planned.get(stage, 0), runs)
        self.most[stage] = max(self.most.get(stage, 0), self.planned[stage])

    def settle(self, stage) -> None:
        """The stage is over: what it ran is what it planned and the most it takes."""
        self.planned[stage] = self.most[stage] = self.done.get(stage, 0)

    def __call__(self, stage, what: str) -> str:
        self.done[stage] = self.done.get(stage, 0) + 1
        self.at_least(stage, self.done[stage])
        done, planned, most = self.totals()
        return progress(done, planned, self.started, what, most)


@dataclass
class Rounds:
    """What rounds() ran: the results by item (each item's in round order), the failures as
    (item, round, outcome), and why it stopped (None: every round ran)."""
    runs: dict
    failures: list
    stopped: str | None = None


def rounds(items, run_one, most: int, counter: Counter, stage, label, stop=None, pipeline=None) -> Rounds:
    """The one rounds engine of the recipe runner, the sweep, the ladder and the doctor's trials: up to
    `most` rounds, each running every item once in alternating order (alternating), each run a child
    process (`run_one(item, round_no)` -> Outcome). After each round `stop(round_no, done)` may end
    it early with its reason (the recipe runner's sequential stopping). `label(item, round_no)` names
    a run on the progress line; the counter counts it under `stage`. `items` may be a function of the
    round and of what is done, for runners that drop an item (a fix that did not apply).
    pipeline (common.runners.pipeline.Pipeline): each run's child started through it, the next one
    prepared while the current one runs (the next round's first is this round's last, alternating)."""
    done = Rounds(runs={}, failures=[])
    choose = items if callable(items) else (lambda _round, _done, fixed=list(items): fixed)
    try:
        for round_no in range(1, most + 1):
            items = list(choose(round_no, done))
            counter.at_least(stage, sum(map(len, done.runs.values())) + len(done.failures) + len(items))
            order = alternating(items, round_no)
            for i, item in enumerate(order):
                print(counter(stage, label(item, round_no)), end=" ", flush=True)
                if pipeline is None:
                    outcome = run_one(item, round_no)
                else:
                    started = pipeline.take(item, round_no)
                    try:
                        if i + 1 < len(order):
                            pipeline.prepare(order[i + 1], round_no)
                        elif round_no < most:
                            pipeline.prepare(item, round_no + 1)
                    except BaseException:
                        started.cancel()
                        raise
                    outcome = started.outcome()
                print(outcome.describe(), flush=True)
                if outcome.kind == "cut":  # a budget ended: no more runs, the round stays unfinished
                    done.stopped = f"round {round_no} cut short: the budget ended during it"
                    return done
                if outcome.kind == "failed":
                    done.failures.append((item, round_no, outcome))
                else:
                    done.runs.setdefault(item, []).append(outcome.result)
            done.stopped = stop(round_no, done) if stop else None
            if done.stopped:
                break
    finally:
        if pipeline is not None:
            pipeline.close()  # a child prepared for a round that will not run
        counter.settle(stage)  # what it ran is all it runs
    return done


def oom_kills(vmstat: Path = Path("/proc/vmstat")) -> int | None:
    """How many processes the Linux kernel's out-of-memory killer has ended since boot (None where it
    does not say): a child ended by SIGKILL while it rose ran out of the host's memory."""
    try:
        for line in vmstat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None
