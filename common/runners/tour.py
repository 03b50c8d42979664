"""`make tour`: the whole cookbook on one GPU in one sitting. The noise floor first (the A/A: amp's slow
twin of the noise-floor workload against itself), then the main pair of every recipe that runs on one GPU (its spec's
main: catalog.main_pair) in the order a reader needs them, each pair one `compare` of 3 alternating
rounds, one process on the GPU at a time; its line as it ends. The analysis waits for any machine:

    python -m common.runners.tour [--budget 480] [--only amp,compile] [--rounds 3] [--bundle DIR]
                                  [--list] [--dry-run] [--smoke] [--no-zygote]
    python -m common.runners.tour --check [--jobs N] [--again] [--only TARGET,...]   # make gpu-check
    python -m common.runners.finalize DIR      # the reports, the overview, the README's column

A deadline that holds, counted from the command's start: the plan (common.runners.sitting) schedules the
pairs whose predicted cost (this bundle's own pairs, then reports/tour_ledger.json, then a stated default
scaled by this GPU's ceilings) fits, names the rest for the next sitting and says how many sittings the
whole tour needs; one still running at the deadline is stopped and dropped whole, and a pair that failed
is never kept as measured. Fail fast: one child per workload starts CUDA and runs a step first (30 s),
or the tour stops and says why. Cheap processes: the device probed, the ceilings measured and the data's
source decided once; every child forked from a server that imported torch and the harness and never
touched CUDA (common.measure.zygote), but a FRESH recipe's (cold_start), whose cold start counts the
imports. The bundle (--bundle, default reports/results/tour/<device>-<commit>/bundle): tour.json (with
each volume's SHA-256) and at most 7 gzipped volumes of the pairs' results, logs, timelines and traces,
each at most 16 MiB, rewritten atomically after each pair, so that a tour killed at any instant keeps
every pair it finished; `make tour` again measures only the pairs that bundle lacks (same commit, same
device), and first stops what a killed tour left running. --check (make gpu-check) runs every target of
common.runners.checks once instead, within the same budget, lock and bundle: the targets it passed are
kept in tour.json's "checks", so the next sitting at that commit on that GPU runs only the others.
"""
import argparse
import contextlib
import functools
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import catalog, env
from common.analysis.results import read_result
from common.analysis.results_compare import Comparison
from common.cli import OneLineParser, pick, positive_int
from common.errors import CookbookError, exit_with
from common.files import atomic_write_bytes, atomic_write_text, file_lock
from common.runners import checks, launch, sitting
from common.workload_specs import noise_floor_workload, resolve, workload_names, workload_spec

LEDGER = env.REPO_ROOT / "reports" / "tour_ledger.json"
MAX_FILES, VOLUME_BYTES = 8, 16 * 2**20  # what a hosted notebook downloads in one go
FIRST = "aa"  # the noise floor's leg
SERVING_PACKAGES = ("fastapi", "uvicorn", "pydantic")  # what the served pair's HTTP endpoint needs
PREFLIGHT_S = 30.0
STOP_GRACE_S = 3.0  # a pair stopped at the deadline: SIGTERM, then SIGKILL after this


@dataclass
class Leg:
    """One pair of the tour: `compare <recipe> --workloads <pair>`, or the A/A (the slow script twice)."""
    name: str  # "aa", or the recipe
    recipe: str
    pair: str
    aa: bool = False
    served: bool = False
    fresh: bool = False  # every process a fresh interpreter (its recipe's FRESH: a cold start counts the imports)

    @property
    def workload(self) -> str:
        return catalog.workload_of(self.pair)


@dataclass
class Done:
    """A finished leg as the bundle keeps it."""
    recipe: str
    pair: str
    aa: bool
    seconds: float
    processes: int
    line: str
    comparison: str | None  # its comparison.json, relative to the work folder's reports (None: served)
    files: list[str] = field(default_factory=list)  # what the leg wrote, relative to the same folder


def legs(profile, gpus: int, only: list[str] | None = None) -> tuple[list[Leg], dict[str, str]]:
    """The tour's pairs in the order a reader needs them (sitting.order) and, for each recipe left out,
    why: the A/A, then every recipe's main pair that runs on one GPU and has what it needs here."""
    plan, skipped = [Leg(FIRST, "amp", noise_floor_workload(), aa=True)], {}
    for r in sorted(catalog.available()):
        if catalog.spec(r).distributed:
            skipped[r] = "data-parallel: needs 2 or more GPUs, one per rank (make recipe-" + r + ")"
            continue
        why = catalog.not_applicable(r, profile) or (missing_packages() if catalog.served(r) else None)
        if why:
            skipped[r] = why
            continue
        plan.append(Leg(r, r, catalog.main_pair(r), served=catalog.served(r),
                        fresh=catalog.spec(r).fresh))
    if only:
        plan = [leg for leg in plan if leg.name in only]
    return sitting.order(plan), skipped


def missing_packages() -> str | None:
    """Why the served pair cannot run here: the packages its endpoint needs that are not installed."""
    import importlib.util

    missing = [name for name in SERVING_PACKAGES if importlib.util.find_spec(name) is None]
    return (f"its HTTP endpoint needs {', '.join(missing)}, not installed here (pip install {' '.join(missing)}; "
            "a GPU image without the network takes them as wheels: docs/tour.md)") if missing else None


def device_key(profile, smoke: bool) -> str:
    """The ledger's and the bundle's name for this machine: the GPU's name, or CPU (smoke)."""
    return profile.name if profile.kind == "cuda" and not profile.simulated else ("CPU smoke" if smoke else "CPU")


def read_ledger(path: Path | None = None) -> dict:
    path = path or LEDGER
    try:
        return json.loads(path.read_text()) if path.exists() else {"default": {}, "devices": {}}
    except ValueError:
        raise CookbookError(f"{path}: unreadable JSON; restore it (git checkout {env.shown_path(path)})") from None


def predicted(leg: Leg, ledger: dict, key: str, rounds: int, bundle_costs: dict | None = None,
              ceilings: dict | None = None, cls: str | None = None) -> sitting.Cost:
    """Seconds the leg should take here (sitting.predicted), a primed pair (PRIME) with its priming process."""
    primed = not leg.aa and leg.pair in catalog.spec(leg.recipe).prime
    return sitting.predicted(leg, ledger, key, rounds, bundle_costs, ceilings, primed, cls)


def setup_s(ledger: dict, key: str) -> float:
    """What a sitting spends before its first pair on this device (measured by earlier sittings), else the default."""
    known = ledger.get("devices", {}).get(key, {})
    default = ledger.get("default", {})
    return float(known.get("setup", default.get("setup smoke" if "smoke" in key else "setup", 30.0)))


def leg_command(leg: Leg, args, work: Path, cls: str | None = None) -> list[str]:
    """The leg's runner; on a GPU, its scripts' steps capped where its class cannot afford the presets'."""
    cmd = [sys.executable, "-m", "common.runners.compare", leg.recipe, "--workloads", leg.pair,
           "--reports-dir", str(work / "reports"), "--device", args.device]
    if not leg.served:
        cmd += ["--rounds", str(args.rounds), "--no-report"]
    cmd += ["--aa"] * leg.aa + ["--smoke"] * args.smoke + [f"--data={d}" for d in args.data]
    caps = sitting.step_flags(cls, leg.workload) if cls and not args.smoke and not leg.served else []
    return cmd + (["--", *caps] if caps else [])


def leg_env(leg: Leg) -> dict[str, str]:
    """The leg's environment: a FRESH recipe's processes start as fresh interpreters, never forked from
    the tour's server, so that its time to first step is `make recipe-<name>`'s."""
    base = {k: v for k, v in os.environ.items() if not (leg.fresh and k == env.ZYGOTE_ENV)}
    return {**base, "PYTHONUNBUFFERED": "1"}


def run_leg(cmd: list[str], timeout: float, log: Path, child_env: dict | None = None) -> tuple[str, int]:
    """Run one leg in its own process group; stop it (all it started too) once `timeout` has passed.
    ("ok" | "failed" | "cut", exit status)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=env.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env=child_env or {**os.environ, "PYTHONUNBUFFERED": "1"})
        running.add(proc.pid)
        try:
            code = proc.wait(timeout=max(timeout, 0.1))
            return ("ok" if code == 0 else "failed"), code
        except subprocess.TimeoutExpired:
            _stop(proc)
            return "cut", proc.returncode if proc.returncode is not None else -9
        except BaseException:
            _stop(proc)
            raise
        finally:
            running.discard(proc.pid)


class Running:
    """The process groups this tour started (its legs' runners, its fork server), kept in a file as they
    start and end, so that the next tour stops what a tour killed at once (SIGKILL) left on the GPU."""

    def __init__(self):
        self.path: Path | None = None
        self.pids: set[int] = set()

    def add(self, pid: int | None) -> None:
        if pid:
            self.pids.add(pid)
            self._write()

    def discard(self, pid: int) -> None:
        self.pids.discard(pid)
        self._write()

    def _write(self) -> None:
        if self.path is not None:
            atomic_write_text(self.path, json.dumps(sorted(self.pids)) + "\n")


running = Running()
# what a tour's process groups lead: its pairs' runners, its fork server, and --check's targets
ORPHANS = ("common.runners.", "common.measure.zygote", "-m pytest")


def stop_orphans(path: Path) -> list[int]:
    """The process groups a killed tour left running (its file of them), stopped where each is still led
    by one of the cookbook's processes (a pid the system gave to another program since is left alone)."""
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    stopped = []
    for pid in pids if isinstance(pids, list) else []:
        try:
            cmdline = Path(f"/proc/{int(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if not any(name in cmdline for name in ORPHANS):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)  # each leads its own session: the group holds its children
            stopped.append(int(pid))
    for pid in stopped:  # gone before this tour measures anything: a dying CUDA context still holds the GPU
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists() or _zombie(pid):
                break
            time.sleep(0.1)
    path.unlink(missing_ok=True)
    return stopped


def _zombie(pid: int) -> bool:
    """Killed and waiting for its parent to read its status: nothing of it runs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _stop(proc) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        launch.stop_group(proc, STOP_GRACE_S)


def pair_line(leg: Leg, comparison: Comparison | None, seconds: float, left: float, status: str) -> str:
    """`amp/<pair>: 1.40x (95% 1.40-1.40), parity ok, 71 s, 409 s left`; "BUSY MACHINE" after the parity where
    other processes took CPU a twin's timed steps needed."""
    head = f"{'A/A ' if leg.aa else ''}{leg.recipe}/{leg.pair}"
    entry = comparison.workloads.get(leg.pair) if comparison else None
    if entry is None or entry.speedup is None:
        return f"{head:<28} {status}, {seconds:.0f} s, {left:.0f} s left"
    s = entry.speedup
    interval = f"95% {s.low:.2f}-{s.high:.2f}" if s.low is not None else "no interval"
    parity = "parity ok" if entry.parity and entry.parity.ok else "parity FAILED"
    busy = any(v is not None and v.load is not None and v.load.busy for v in (entry.slow, entry.fast))
    return (f"{head:<28} {s.ratio:.2f}x ({interval}), {parity}{', BUSY MACHINE' if busy else ''}, {seconds:.0f} s, "
            f"{left:.0f} s left")


# --- the bundle ----------------------------------------------------------------------------------
def snapshot(root: Path) -> dict[str, int]:
    """Every file under root (relative) with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def new_files(root: Path, before: dict[str, int]) -> list[str]:
    """Files under root (relative) written since `before` (snapshot), no locks or temporaries."""
    return sorted(f for f, t in snapshot(root).items()
                  if before.get(f) != t and not f.endswith((".lock", ".tmp")) and not f.startswith("."))


def pack(root: Path, names: list[str], limit: int = VOLUME_BYTES, most: int = MAX_FILES - 1):
    """The files into gzipped tar volumes of at most `limit` bytes each, at most `most` of them, results
    before traces; (volumes as bytes, the names left out)."""
    volumes, left_out = [], []
    buf, tar = None, None

    def close():
        if tar is not None:
            tar.close()
            volumes.append(buf.getvalue())

    for name in sorted(names, key=lambda n: (n.startswith("traces/"), n)):
        size = (root / name).stat().st_size
        if tar is None or buf.tell() + size // 4 > limit * 0.9:  # a trace compresses ~5-10x: a margin
            close()
            if len(volumes) >= most or size // 4 > limit * 0.9:
                left_out.append(name)
                buf = tar = None
                continue
            buf = io.BytesIO()
            tar = tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6)
        tar.add(root / name, arcname=name)
    close()
    while volumes and len(volumes[-1]) > limit:  # rare: the margin missed; its files are left out instead
        volumes.pop()
        left_out.append("(a volume over the limit)")
    return volumes, left_out


def write_bundle(bundle: Path, manifest: dict, root: Path) -> None:
    """The volumes, then tour.json last: a reader trusts tour.json's legs, whose files the volumes hold."""
    names = sorted({f for d in manifest["legs"].values() for f in d["files"]})
    volumes, left_out = pack(root, names, VOLUME_BYTES)
    # a trace that does not fit is read here first: its pair's evidence is kept, only the file is left out
    waiting = [root / d["comparison"] for d in manifest["legs"].values()
               if d["comparison"] and set(d["files"]) & set(left_out)
               and '"unread"' in (root / d["comparison"]).read_text()]
    if waiting:
        launch.read_traces(waiting)
        volumes, left_out = pack(root, names, VOLUME_BYTES)
    bundle.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(volumes, 1):
        atomic_write_bytes(bundle / f"pairs-{i}.tar.gz", data)
    for stale in bundle.glob("pairs-*.tar.gz"):
        if int(stale.name.split("-")[1].split(".")[0]) > len(volumes):
            stale.unlink()
    manifest["volumes"] = [f"pairs-{i}.tar.gz" for i in range(1, len(volumes) + 1)]
    manifest["sha256"] = {f"pairs-{i}.tar.gz": hashlib.sha256(data).hexdigest() for i, data in enumerate(volumes, 1)}
    manifest["left_out"] = left_out
    atomic_write_text(bundle / "tour.json", json.dumps(manifest, indent=1) + "\n")


def unpack(bundle: Path, manifest: dict, root: Path) -> None:
    for name in manifest.get("volumes", []):
        with tarfile.open(bundle / name) as tar:
            tar.extractall(root, filter="data")


MANIFEST_KEYS = ("device", "commit", "reports_dir", "legs", "volumes")
LEG_KEYS = ("recipe", "pair", "aa", "line", "comparison", "files")


def read_manifest(bundle: Path) -> dict | None:
    """The bundle's tour.json, checked for what its readers take from it; None where there is none."""
    path = bundle / "tour.json"
    try:
        manifest = json.loads(path.read_text()) if path.exists() else None
    except ValueError:
        manifest = []
    if manifest is None:
        return None
    missing = [k for k in MANIFEST_KEYS if k not in manifest] if isinstance(manifest, dict) else ["(an object)"]
    if not missing and isinstance(manifest["legs"], dict):
        missing = [f"legs.{name}.{k}" for name, leg in manifest["legs"].items() for k in LEG_KEYS
                   if not isinstance(leg, dict) or k not in leg][:3]
    if missing:
        raise CookbookError(f"{path}: not a whole tour manifest (no {', '.join(missing)}); move it away or pass "
                            "another --bundle")
    return manifest


def check_volumes(bundle: Path, manifest: dict) -> None:
    """Each volume tour.json names, present and whole: its SHA-256 as the tour wrote it (a bundle from a
    tour before checksums: readable to its end). One line naming the first damaged one, else nothing."""
    sums = manifest.get("sha256") or {}
    for name in manifest["volumes"]:
        path = bundle / name
        if not path.is_file():
            raise CookbookError(f"{bundle}: volume {name} is missing (tour.json names {len(manifest['volumes'])}); "
                                "copy the whole bundle folder again")
        if name in sums:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != sums[name]:
                raise CookbookError(f"{bundle}: volume {name} is damaged ({path.stat().st_size} bytes, its "
                                    "checksum differs from the one the tour wrote: an interrupted download?); "
                                    "copy it again")
        else:
            try:
                with tarfile.open(path) as tar:
                    tar.getmembers()
            except (tarfile.TarError, OSError, EOFError) as e:
                raise CookbookError(f"{bundle}: volume {name} is damaged ({type(e).__name__}: a truncated "
                                    "download?); copy it again") from None


# --- the sitting ---------------------------------------------------------------------------------
def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.tour", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=positive_int, default=480, metavar="SECONDS",
                   help="the sitting's deadline: no pair starts that is not predicted to end within it (default 480)")
    p.add_argument("--rounds", type=positive_int, default=3, help="alternating rounds per pair (default 3)")
    p.add_argument("--only", help="comma-separated legs: aa and recipe names (default: every one)")
    p.add_argument("--bundle", help="the bundle's folder (default reports/results/tour/<device>-<commit>/bundle)")
    p.add_argument("--list", action="store_true", help="the legs and their main pairs; run nothing")
    p.add_argument("--dry-run", action="store_true", help="the plan with each pair's predicted seconds; run nothing")
    p.add_argument("--classes", action="store_true",
                   help="what a sitting of --budget seconds measures on each GPU class, from the plan; run nothing")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on a CPU: the whole tour's pipeline in minutes")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", action="append", default=[], help="passed to each pair (compare --data)")
    p.add_argument("--no-zygote", action="store_true", help="start every child as a fresh interpreter")
    p.add_argument("--check", action="store_true",
                   help="make gpu-check: every target once, small (the GPU tests, every recipe, sweep, ladder, "
                        "diagnosis and the doctor), one line each; --only then names targets (see --list)")
    p.add_argument("--jobs", type=positive_int, help="--check: targets at a time (default: 1 on a GPU, 4 with --smoke)")
    p.add_argument("--again", action="store_true",
                   help="--check: every target, also those an earlier sitting passed at this commit on this device")
    return p.parse_args(argv)


def prepare_data(plan: list[Leg], args) -> None:
    """Each workload's data found, downloaded or synthesized once, under the loaders' own locks and
    caches, before the first child: a fresh machine's download is not a child's start-up (nor the
    preflight's 30 s), and no pair's first process pays it. Where the data comes from is decided here
    once (datasource.decide): the children never probe the network, which on a machine that drops its
    traffic cost each of them a 10 s time-out."""
    from common.workloads import datasource

    for workload, flags in launch.data_flags(args.data, workload_names()).items():
        if workload in {leg.workload for leg in plan}:
            t0 = time.perf_counter()
            spec = workload_spec(workload)
            given = flags[1] if flags else None
            if given is None and spec.locate:
                found = resolve(spec.locate)(None)
                datasource.decide(spec.dataset or workload, found[0], found[-1])
            *_, source = resolve(spec.load)(given)
            print(f"data  {workload}: {getattr(source, 'kind', source)} ({time.perf_counter() - t0:.1f} s)", flush=True)


def preflight(plan: list[Leg], work: Path, args) -> str | None:
    """One child per workload (amp's slow twin of it, else the first leg's that neither compiles nor is
    served) starts CUDA and runs a step, within PREFLIGHT_S in all; why not, or None."""
    t0 = time.perf_counter()
    firsts = {}
    for leg in plan:  # amp's pair of the workload where there is one: seconds, nothing compiled
        amp = "amp" if leg.workload in catalog.workloads("amp") else None
        if amp or not (leg.served or leg.fresh):
            firsts.setdefault(leg.workload, (amp or leg.recipe, leg.workload if amp else leg.pair))
    for workload, (recipe, pair) in firsts.items():
        left = PREFLIGHT_S - (time.perf_counter() - t0)
        flags = ["--steps", "1", "--warmup", "1", "--profile-steps", "0", "--probe-steps", "0", "--min-time", "0",
                 "--device", args.device, "--trace-dir", str(work / "preflight")]
        flags += ["--smoke"] * args.smoke + [f"--data={d.split('=', 1)[-1]}" for d in args.data
                                             if d == "synthetic" or d.startswith(workload + "=")]
        out = work / "preflight" / f"{workload}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        outcome = launch.child(["-m", catalog.module(recipe, pair, "slow")], flags, out, timeout=max(left, 1.0))
        if outcome.kind != "ok":
            tail = "; ".join(outcome.tail[-2:]) if outcome.tail else f"{outcome.kind} after {outcome.seconds:.0f} s"
            return f"a {workload} child could not run a step within {PREFLIGHT_S:.0f} s: {tail} (log {outcome.log})"
    return None


SITTING_ENV = (env.DEVICE_SEEN_ENV, env.DATA_DECIDED_ENV, env.OFFLINE_ENV)  # what a sitting sets for its children


def tour(argv=None, clock=time.monotonic, run=run_leg, check=preflight) -> int:
    """The sitting (_tour); what it set for its runners (SITTING_ENV) is put back after it."""
    before = {k: os.environ.get(k) for k in SITTING_ENV}
    try:
        # held while the tour runs: the next one stops only what a dead tour left (stop_orphans), never a live one's
        with file_lock(env.REPO_ROOT / "reports" / "results" / "tour" / ".running.lock", blocking=False) as alone:
            return _tour(argv, clock, run, check, alone)
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _tour(argv, clock, run, check, alone=True) -> int:
    """The sitting. clock, run and check stand in for the time, a leg's run and the preflight in tests;
    alone: no other tour runs from this checkout (it holds the lock)."""
    started = clock()  # the deadline counts from here: the probes below are the sitting's time too
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.classes:
        print(class_plans(args.budget, args.rounds))
        return 0
    pidfile = env.REPO_ROOT / "reports" / "results" / "tour" / ".running.json"
    if not (args.list or args.dry_run or alone):
        raise CookbookError("another make tour is running from this checkout (it holds reports/results/tour/"
                            ".running.lock): two on one GPU would time each other; wait for it or stop it")
    if not (args.list or args.dry_run) and (stopped := stop_orphans(pidfile)):
        print(f"tour: stopped {len(stopped)} process group(s) a killed tour left running "
              f"({', '.join(map(str, stopped))})", flush=True)
    if args.smoke and args.device == "auto":
        args.device = "cpu"
    cuda = launch.use_cuda(args.device)
    profile = launch.device_profile(cuda)
    if args.check:
        return check_sitting(args, profile, started, clock)
    plan, skipped = legs(profile, launch.cuda_device_count() if cuda else 0)
    only = pick("--only", args.only, [leg.name for leg in plan], "leg") if args.only else None
    plan = [leg for leg in plan if not only or leg.name in only]
    key, ledger = device_key(profile, args.smoke), read_ledger()
    cls = sitting.gpu_class(profile.name, profile.capability) if profile.kind == "cuda" else None
    if cuda and not (args.list or args.dry_run):
        launch.ensure_ceiling(True)  # measured once per machine: the plan scales its defaults by them
    ceilings = sitting.read_ceilings(ceiling_cache(), profile.name) if cls else None
    commit = env.git_commit()
    root, bundle, manifest = open_bundle(args, key, commit)
    costs = (manifest or {}).get("costs", {})
    todo = [leg for leg in plan if leg.name not in (manifest or {}).get("legs", {})]
    cost_of = functools.partial(predicted, ledger=ledger, key=key, rounds=args.rounds, bundle_costs=costs,
                                ceilings=ceilings, cls=cls)
    spent = clock() - started
    schedule = sitting.schedule(todo, cost_of, args.budget, max(spent, setup_s(ledger, key)))
    gpu = f"{key} ({cls} class)" if cls else key
    for name, why in skipped.items():
        if not only or name in only:
            print(f"{name:<18} left out: {why}")
    if args.list or args.dry_run:
        for leg in plan:
            had = leg.name not in {x.name for x in todo}
            cost = cost_of(leg)
            print(f"{leg.name:<18} {leg.recipe}/{leg.pair}" + (f"  ~{cost.seconds:.0f} s ({cost.source})"
                                                               if args.dry_run else "") + ("  (in the bundle)" * had))
        if args.dry_run:
            print("\n".join(sitting.schedule_lines(schedule, gpu)) + f" (ledger {env.shown_path(LEDGER)})")
        return 0
    work = root / "work"
    manifest = unpacked(bundle, manifest, work, profile, commit, key, args)
    for leg in plan:
        if leg.name in manifest["legs"]:
            print(f"have  {manifest['legs'][leg.name]['line']}", flush=True)
    deadline = started + args.budget
    print(f"tour on {gpu} at {commit[:12]}: {len(todo)} pair(s) to measure, {args.budget} s from the command's "
          f"start (bundle {env.shown_path(bundle)})", flush=True)
    for line in sitting.schedule_lines(schedule, gpu) if todo else []:
        print(f"plan  {line}", flush=True)
    if not schedule.now:
        return 0
    status = 0
    running.path = pidfile
    # the device probed once, the ceilings measured once (above): every runner below reads them
    os.environ[env.DEVICE_SEEN_ENV] = json.dumps({"gpus": launch.cuda_device_count() if cuda else 0,
                                                  "profile": profile.to_json() if cuda else None, "ceiling": True})
    if check is preflight:  # the tests' stand-in preflight needs no data either
        prepare_data([leg for leg, _ in schedule.now], args)
    with launch.warm_server(cuda, compiles=True, wanted=not args.no_zygote) as server:
        running.add(server)
        why = check([leg for leg, _ in schedule.now], work, args)
        if why:
            print(f"tour: stopped before the first pair: {why}", file=sys.stderr, flush=True)
            return 1
        manifest["setup_s"] = round(clock() - started, 1)  # what this sitting spent before its first pair
        for leg, cost in schedule.now:
            left = deadline - clock()
            if cost.seconds > left:
                print(f"skip  {leg.recipe}/{leg.pair}: predicted ~{cost.seconds:.0f} s, {left:.0f} s left: the next "
                      "sitting", flush=True)
                continue
            reports = work / "reports"
            reports.mkdir(parents=True, exist_ok=True)
            before = snapshot(reports)
            t0 = clock()
            kind, code = run(leg_command(leg, args, work, cls), left, work / f"{leg.name}.log", leg_env(leg))
            took = clock() - t0
            if kind == "cut":
                print(f"cut   {leg.recipe}/{leg.pair} at the deadline after {took:.0f} s: dropped whole", flush=True)
                break
            comparison = _comparison(reports, leg)
            line = pair_line(leg, comparison, took, deadline - clock(), served_verdict(reports, leg) or kind)
            status |= kind != "ok"
            if not measured(leg, comparison, kind):  # never kept, its seconds never in the ledger: retried next time
                print(f"{line}: not kept (exit {code}; log {env.shown_path(work / f'{leg.name}.log')})", flush=True)
                continue
            files = new_files(reports, before)
            processes = 2 * args.rounds if not leg.served else 1
            manifest["legs"][leg.name] = asdict(Done(leg.recipe, leg.pair, leg.aa, round(took, 1), processes, line,
                                                    _relative(reports, leg), files))
            manifest["costs"][leg.name] = round(took if leg.served else took / processes, 2)
            manifest["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            write_bundle(bundle, manifest, reports)  # kept before it is said
            print(line if kind == "ok" else f"{line} (exit {code}; log {env.shown_path(work / f'{leg.name}.log')})",
                  flush=True)
        running.discard(server)
    longer = {leg.name for leg, _ in schedule.never}
    left_over = [f"{leg.recipe}/{leg.pair} ({'a longer sitting' if leg.name in longer else 'the next sitting'})"
                 for leg in plan if leg.name not in manifest["legs"]]
    if left_over:
        print(f"tour: not measured: {', '.join(left_over)}; make tour again on this GPU at this commit measures only "
              "these", flush=True)
    print(f"tour: {len(manifest['legs'])} pair(s) in {env.shown_path(bundle)}; analyse anywhere: "
          f"make finalize BUNDLE={env.shown_path(bundle)}", flush=True)
    return 1 if status else 0


def open_bundle(args, key: str, commit: str) -> tuple[Path, Path, dict | None]:
    """(the sitting's folder, its bundle, the bundle's manifest or None): a bundle of another commit or
    GPU is refused in one line."""
    # a dirty tree's sitting apart from the clean commit's: its bundle never mixes with theirs
    tag = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
    root = env.REPO_ROOT / "reports" / "results" / "tour" / f"{slug(key)}-{tag}"
    bundle = Path(args.bundle).absolute() if args.bundle else root / "bundle"
    manifest = read_manifest(bundle)
    if manifest and (manifest.get("commit"), manifest.get("device")) != (commit, key):
        raise CookbookError(f"{bundle} holds a tour of {manifest.get('device')} at {manifest.get('commit')}: "
                            f"this is {key} at {commit}; pass another --bundle (a pair's processes never mix code "
                            "or GPUs)")
    return root, bundle, manifest


def unpacked(bundle: Path, manifest: dict | None, work: Path, profile, commit: str, key: str, args) -> dict:
    """The manifest, its pairs' files unpacked under work/reports; a new one where the bundle had none."""
    work.mkdir(parents=True, exist_ok=True)
    if manifest:
        check_volumes(bundle, manifest)
        unpack(bundle, manifest, work / "reports")
    else:
        manifest = new_manifest(key, profile, commit, args, work)
    manifest["reports_dir"] = str(work / "reports")
    return manifest


def new_manifest(key: str, profile, commit: str, args, work: Path) -> dict:
    """A bundle's tour.json before its first pair or check: what it was measured on, nothing measured yet."""
    return {"schema": 1, "device": key, "profile": profile.to_json(), "commit": commit, "smoke": args.smoke,
            "rounds": args.rounds, "reports_dir": str(work / "reports"), "legs": {}, "costs": {}, "volumes": []}


def check_sitting(args, profile, started: float, clock) -> int:
    """make gpu-check: every target once (common.runners.checks), within the sitting's budget from the
    command's start. A target that passed is kept in the bundle's manifest ("checks") with the commit and
    the device, so the next sitting there runs only the others (--again: all of them); its reports and
    logs stay in the sitting's folder, never over the committed reports."""
    if not args.smoke and not launch.cuda_available():  # a simulated profile is no GPU
        raise CookbookError("no CUDA device here: make gpu-check is for a GPU machine "
                            "(ARGS='--smoke' runs the same targets at CPU sizes)")
    key, commit = device_key(profile, args.smoke), env.git_commit()
    root, bundle, manifest = open_bundle(args, key, commit)
    out = bundle.parent / "checks"  # beside the bundle: the sitting's folder, never the committed reports
    chosen = checks.targets(args.smoke, out)
    wanted = pick("--only", args.only, [t.name for t in chosen], "target") if args.only else None
    chosen = [t for t in chosen if not wanted or t.name in wanted]
    if args.list or args.dry_run:
        print("\n".join(t.name for t in chosen))
        return 0
    manifest = manifest or new_manifest(key, profile, commit, args, root / "work")
    manifest.setdefault("checks", {})
    kept = {} if args.again else dict(manifest["checks"])
    done = [t.name for t in chosen if t.name in kept]
    chosen = [t for t in chosen if t.name not in kept]
    jobs = args.jobs or checks.default_jobs(args.smoke)
    print(f"gpu-check: device profile: {profile.summary()}", flush=True)
    if done:
        print(f"gpu-check: {len(done)} target(s) passed in an earlier sitting at {commit} on this device "
              f"(--again runs them too): {', '.join(done)}", flush=True)
    print(f"gpu-check: {len(chosen)} targets, {jobs} at a time, within {args.budget} s; reports and logs in "
          f"{env.shown_path(out)} (bundle {env.shown_path(bundle)})", flush=True)

    def said(ok: bool, line: str, target) -> None:
        print(line, flush=True)
        if ok and not commit.endswith("-dirty"):  # kept as it ends: a sitting cut off keeps what passed
            manifest["checks"][target.name] = line
            bundle.mkdir(parents=True, exist_ok=True)  # tour.json alone: the pairs' volumes stay as they are
            atomic_write_text(bundle / "tour.json", json.dumps(manifest, indent=1) + "\n")

    deadline = time.perf_counter() + args.budget - (clock() - started)
    running.path = env.REPO_ROOT / "reports" / "results" / "tour" / ".running.json"  # what the next tour stops
    # every target's children forked warm from one server, which never touches CUDA
    with launch.warm_server(profile.kind == "cuda", compiles=True, wanted=not args.no_zygote) as server:
        running.add(server)
        failed = checks.run_all(chosen, jobs, deadline, out / "logs", said, args.budget, running)
        running.discard(server)
    print(f"gpu-check: {len(chosen) - len(failed)} of {len(chosen)} ok" + (f"; failed: {', '.join(sorted(failed))}"
                                                                          if failed else "")
          + (f" ({len(done)} more passed earlier)" if done else ""), flush=True)
    return 1 if failed else 0


def class_schedules(budget: int, rounds: int = 3) -> list[tuple[str, object, sitting.Schedule]]:
    """(class, profile, plan) of a first sitting of `budget` seconds on each GPU class, as the tour would
    plan it from the committed ledger: its own figures where a class's GPU has some (the H200), else the
    defaults scaled by the class's datasheet ceilings (sitting.DATASHEET), with each class's step caps."""
    from common.analysis import device

    ledger, out = read_ledger(), []
    h100 = device.SIMULATED["H100"]
    for profile in (device.SIMULATED["T4"], device.SIMULATED["A100"], h100,
                    device.DeviceProfile("cuda", "NVIDIA H200", h100.capability, 139.0, simulated=True)):
        cls = sitting.gpu_class(profile.name, profile.capability)
        cost_of = functools.partial(predicted, ledger=ledger, key=profile.name, rounds=rounds,
                                    ceilings=sitting.DATASHEET.get(cls), cls=cls)
        planned = sitting.schedule(legs(profile, 1)[0], cost_of, budget, setup_s(ledger, profile.name))
        out.append((cls, profile, planned))
    return out


def class_plans(budget: int, rounds: int = 3) -> str:
    """The table docs/tour.md shows: what a first sitting measures on each GPU class (class_schedules)."""
    out = [f"| GPU class | this sitting ({budget} s) | next sittings | sittings |", "|---|---|---|---:|"]
    for cls, profile, schedule in class_schedules(budget, rounds):
        names = ", ".join(leg.name for leg, _ in schedule.now) or "none"
        later = ", ".join(leg.name for leg, _ in schedule.later) or "none"
        later += "".join(f"; {leg.name} needs a longer sitting" for leg, _ in schedule.never)
        out.append(f"| {cls} ({profile.name}) | {names} | {later} | {schedule.sittings} |")
    return "\n".join(out)


def measured(leg: Leg, comparison: Comparison | None, kind: str) -> bool:
    """Whether a leg's pair was measured and may be kept: its runner ended well, or (a recipe's pair)
    every process ran and only the check of its result failed (parity: a finding, reported); never a
    pair whose processes failed, nor a served pair whose runner did."""
    if kind == "ok":
        return True
    if leg.served or comparison is None or comparison.failures:
        return False
    return bool(comparison.workloads) and all(e.slow and e.fast and e.speedup for e in comparison.workloads.values())


def ceiling_cache() -> Path:
    from common.analysis import ceiling

    return ceiling.path()


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


def served_verdict(reports: Path, leg: Leg) -> str | None:
    """A served pair's headline, as its report (rendered by the serving runner) states it."""
    path = reports / f"{leg.recipe}.md"
    if not leg.served or not path.exists():
        return None
    bold = next((line for line in path.read_text().splitlines() if line.startswith("**")), None)
    return bold.split("**")[1].rstrip(".") if bold else None


def _relative(reports: Path, leg: Leg) -> str | None:
    if leg.served:
        return None
    return str(Path("results") / leg.recipe / ("aa" if leg.aa else "") / "comparison.json").replace("//", "/")


def _comparison(reports: Path, leg: Leg) -> Comparison | None:
    rel = _relative(reports, leg)
    path = reports / rel if rel else None
    if path is None or not path.exists():
        return None
    try:
        return read_result(path, Comparison)
    except CookbookError:
        return None


def main():
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        sys.exit(tour())
    except CookbookError as e:
        exit_with(e, "common.runners.tour")
    except KeyboardInterrupt:
        print("\ninterrupted: every pair that finished is in the bundle", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
