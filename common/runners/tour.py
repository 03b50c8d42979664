"""`make tour`: the whole cookbook on one GPU in one sitting. The noise floor first (the A/A: amp's churn
slow twin against itself), then the main pair of every recipe that runs on one GPU (MAIN in its
settings: catalog.main_pair), compile, cold_start and serving last, each pair one `compare` of 3 alternating rounds,
one process on the GPU at a time; its line as it ends. The analysis waits for any machine:

    python -m common.runners.tour [--budget 480] [--only amp,compile] [--rounds 3] [--bundle DIR]
                                  [--list] [--dry-run] [--smoke] [--no-zygote]
    python -m common.runners.finalize DIR      # the reports, the overview, the README's column

A deadline that holds: a pair starts only when its predicted cost (reports/tour_ledger.json: seconds
per process on this GPU, else a stated default) fits what is left; one still running at the deadline is
stopped and dropped whole. Fail fast: one child per workload starts CUDA and runs a step first (30 s),
or the tour stops and says why. Cheap processes: the device probed and the ceilings measured once; every
child forked from a server that imported torch and the harness and never touched CUDA
(common.measure.zygote). The bundle (--bundle, default reports/results/tour/<device>-<commit>/bundle):
tour.json and at most 7 gzipped volumes of the pairs' results, logs, timelines and traces, each at most
16 MiB, rewritten atomically after each pair, so that a tour killed at any instant keeps every pair it
finished; `make tour` again measures only the pairs that bundle lacks (same commit, same device).
"""
import argparse
import contextlib
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
from common.analysis.results import Comparison, atomic_write_bytes, atomic_write_text, read_result
from common.cli import OneLineParser, pick, positive_int
from common.errors import CookbookError, exit_with
from common.runners import launch

LEDGER = env.REPO_ROOT / "reports" / "tour_ledger.json"
MAX_FILES, VOLUME_BYTES = 8, 16 * 2**20  # what a hosted notebook downloads in one go
FIRST = "aa"  # the noise floor's leg
LAST = ("compile", "cold_start", "serving")  # compilation in every process, and the served pair: the longest, last
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
    """The sitting's plan and, for each pair left out, why: the A/A, then every recipe's main pair that
    runs on one GPU, compile, cold_start and serving last."""
    recipes = sorted(catalog.available(), key=lambda r: (r in LAST, LAST.index(r) if r in LAST else 0, r))
    plan, skipped = [Leg(FIRST, "amp", "churn", aa=True)], {}
    for r in recipes:
        if getattr(catalog.settings(r), "DISTRIBUTED", False):
            skipped[r] = "data-parallel: needs 2 or more GPUs, one per rank (make recipe-" + r + ")"
            continue
        why = catalog.not_applicable(r, profile)
        if why:
            skipped[r] = why
            continue
        plan.append(Leg(r, r, catalog.main_pair(r), served=catalog.served(r)))
    if only:
        plan = [leg for leg in plan if leg.name in only]
    return plan, skipped


def device_key(profile, smoke: bool) -> str:
    """The ledger's and the bundle's name for this machine: the GPU's name, or CPU (smoke)."""
    return profile.name if profile.kind == "cuda" and not profile.simulated else ("CPU smoke" if smoke else "CPU")


def read_ledger(path: Path | None = None) -> dict:
    path = path or LEDGER
    return json.loads(path.read_text()) if path.exists() else {"default": {}, "devices": {}}


def predicted_s(leg: Leg, ledger: dict, key: str, rounds: int) -> float:
    """Seconds the leg should take here: its processes (a primed pair's one more: PRIME) at this device's
    measured seconds each (the ledger), else the stated default for its recipe or its workload, plus the
    runner's own start."""
    default = ledger.get("default", {})
    known = ledger.get("devices", {}).get(key, {})
    kind = "smoke" if "smoke" in key else "process"
    if leg.served:
        return float(known.get(leg.name, default.get(f"serving {kind}", default.get("serving", 240.0))))
    per_process = known.get(leg.name, default.get(f"{leg.name} {kind}", default.get(f"{leg.workload} {kind}", 20.0)))
    primed = not leg.aa and leg.pair in getattr(catalog.settings(leg.recipe), "PRIME", ())
    return float(default.get("leg_overhead", 3.0)) + (2 * rounds + primed) * float(per_process)


def leg_command(leg: Leg, args, work: Path) -> list[str]:
    cmd = [sys.executable, "-m", "common.runners.compare", leg.recipe, "--workloads", leg.pair,
           "--reports-dir", str(work / "reports"), "--device", args.device]
    if not leg.served:
        cmd += ["--rounds", str(args.rounds), "--no-report"]
    cmd += ["--aa"] * leg.aa + ["--smoke"] * args.smoke + [f"--data={d}" for d in args.data]
    return cmd


def run_leg(cmd: list[str], timeout: float, log: Path) -> tuple[str, int]:
    """Run one leg in its own process group; stop it (all it started too) once `timeout` has passed.
    ("ok" | "failed" | "cut", exit status)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=env.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            code = proc.wait(timeout=max(timeout, 0.1))
            return ("ok" if code == 0 else "failed"), code
        except subprocess.TimeoutExpired:
            _stop(proc)
            return "cut", proc.returncode if proc.returncode is not None else -9
        except BaseException:
            _stop(proc)
            raise


def _stop(proc) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        launch.stop_group(proc, STOP_GRACE_S)


def pair_line(leg: Leg, comparison: Comparison | None, seconds: float, left: float, status: str) -> str:
    """`resnet18 amp: 1.40x (95% 1.40-1.40), parity ok, 71 s, 409 s left`."""
    head = f"{'A/A ' if leg.aa else ''}{leg.recipe}/{leg.pair}"
    entry = comparison.workloads.get(leg.pair) if comparison else None
    if entry is None or entry.speedup is None:
        return f"{head:<28} {status}, {seconds:.0f} s, {left:.0f} s left"
    s = entry.speedup
    interval = f"95% {s.low:.2f}-{s.high:.2f}" if s.low is not None else "no interval"
    parity = "parity ok" if entry.parity and entry.parity.ok else "parity FAILED"
    return f"{head:<28} {s.ratio:.2f}x ({interval}), {parity}, {seconds:.0f} s, {left:.0f} s left"


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
    p.add_argument("--smoke", action="store_true", help="tiny sizes on a CPU: the whole tour's pipeline in minutes")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", action="append", default=[], help="passed to each pair (compare --data)")
    p.add_argument("--no-zygote", action="store_true", help="start every child as a fresh interpreter")
    return p.parse_args(argv)


def prepare_data(plan: list[Leg], args) -> None:
    """Each workload's data read, downloaded or synthesized once, under the loaders' own locks and
    caches, before the first child: a fresh machine's download is not a child's start-up (nor the
    preflight's 30 s), and no pair's first process pays it."""
    from common.presets import WORKLOADS
    from common.workloads import cifar10, telco

    loaders = {"churn": telco.load, "resnet18": cifar10.load_train}
    for workload, flags in launch.data_flags(args.data, WORKLOADS).items():
        if workload in {leg.workload for leg in plan}:
            t0 = time.perf_counter()
            *_, source = loaders[workload](flags[1] if flags else None)
            print(f"data  {workload}: {getattr(source, 'kind', source)} ({time.perf_counter() - t0:.1f} s)", flush=True)


def preflight(plan: list[Leg], work: Path, args) -> str | None:
    """One child per workload starts CUDA and runs a step, within PREFLIGHT_S in all; why not, or None."""
    t0 = time.perf_counter()
    for workload in dict.fromkeys(leg.workload for leg in plan):
        left = PREFLIGHT_S - (time.perf_counter() - t0)
        flags = ["--steps", "1", "--warmup", "1", "--profile-steps", "0", "--probe-steps", "0", "--min-time", "0",
                 "--device", args.device, "--trace-dir", str(work / "preflight")]
        flags += ["--smoke"] * args.smoke + [f"--data={d.split('=', 1)[-1]}" for d in args.data
                                             if d == "synthetic" or d.startswith(workload + "=")]
        out = work / "preflight" / f"{workload}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        outcome = launch.child(["-m", f"recipes.amp.{workload}_slow"], flags, out, timeout=max(left, 1.0))
        if outcome.kind != "ok":
            tail = "; ".join(outcome.tail[-2:]) if outcome.tail else f"{outcome.kind} after {outcome.seconds:.0f} s"
            return f"a {workload} child could not run a step within {PREFLIGHT_S:.0f} s: {tail} (log {outcome.log})"
    return None


def tour(argv=None, clock=time.monotonic, run=run_leg, check=preflight) -> int:
    """The sitting (_tour); what it probed for its runners (env.DEVICE_SEEN_ENV) is put back after it."""
    before = os.environ.get(env.DEVICE_SEEN_ENV)
    try:
        return _tour(argv, clock, run, check)
    finally:
        if before is None:
            os.environ.pop(env.DEVICE_SEEN_ENV, None)
        else:
            os.environ[env.DEVICE_SEEN_ENV] = before


def _tour(argv, clock, run, check) -> int:
    """The sitting. clock, run and check stand in for the time, a leg's run and the preflight in tests."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.smoke and args.device == "auto":
        args.device = "cpu"
    cuda = launch.use_cuda(args.device)
    profile = launch.device_profile(cuda)
    plan, skipped = legs(profile, launch.cuda_device_count() if cuda else 0)
    only = pick("--only", args.only, [leg.name for leg in plan], "leg") if args.only else None
    plan = [leg for leg in plan if not only or leg.name in only]
    key, ledger = device_key(profile, args.smoke), read_ledger()
    if args.list or args.dry_run:
        total = 0.0
        for leg in plan:
            cost = predicted_s(leg, ledger, key, args.rounds)
            total += cost
            print(f"{leg.name:<18} {leg.recipe}/{leg.pair}" + (f"  ~{cost:.0f} s" if args.dry_run else ""))
        for name, why in skipped.items():
            print(f"{name:<18} left out: {why}")
        if args.dry_run:
            print(f"tour on {key}: {len(plan)} pairs, ~{total:.0f} s predicted (ledger {env.shown_path(LEDGER)}), "
                  f"budget {args.budget} s")
        return 0
    commit = env.git_commit()
    root = env.REPO_ROOT / "reports" / "results" / "tour" / f"{slug(key)}-{commit[:12]}"
    bundle = Path(args.bundle).absolute() if args.bundle else root / "bundle"
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(bundle)
    if manifest and (manifest.get("commit"), manifest.get("device")) != (commit, key):
        raise CookbookError(f"{bundle} holds a tour of {manifest.get('device')} at {manifest.get('commit')}: "
                            f"this is {key} at {commit}; pass another --bundle (a pair's processes never mix code "
                            "or GPUs)")
    if manifest:
        check_volumes(bundle, manifest)
        unpack(bundle, manifest, work / "reports")
    else:
        manifest = {"schema": 1, "device": key, "profile": profile.to_json(), "commit": commit, "smoke": args.smoke,
                    "rounds": args.rounds, "reports_dir": str(work / "reports"), "legs": {}, "costs": {}}
    manifest["reports_dir"] = str(work / "reports")
    todo = [leg for leg in plan if leg.name not in manifest["legs"]]
    for leg in plan:
        if leg.name in manifest["legs"]:
            print(f"have  {manifest['legs'][leg.name]['line']}", flush=True)
    deadline = clock() + args.budget
    print(f"tour on {key} at {commit[:12]}: {len(todo)} pair(s) to measure within {args.budget} s "
          f"(bundle {env.shown_path(bundle)})", flush=True)
    if not todo:
        return 0
    status = 0
    # the device probed once, the ceilings measured once: every runner below reads them
    if cuda:
        launch.ensure_ceiling(True)
    os.environ[env.DEVICE_SEEN_ENV] = json.dumps({"gpus": launch.cuda_device_count() if cuda else 0,
                                                  "profile": profile.to_json() if cuda else None, "ceiling": True})
    if check is preflight:  # the tests' stand-in preflight needs no data either
        prepare_data(todo, args)
    with launch.warm_server(cuda, compiles=True, wanted=not args.no_zygote):
        why = check(todo, work, args)
        if why:
            print(f"tour: stopped before the first pair: {why}", file=sys.stderr, flush=True)
            return 1
        for leg in todo:
            left = deadline - clock()
            cost = predicted_s(leg, ledger, key, args.rounds)
            if cost > left:
                print(f"skip  {leg.recipe}/{leg.pair}: predicted ~{cost:.0f} s, {left:.0f} s left", flush=True)
                continue
            reports = work / "reports"
            reports.mkdir(parents=True, exist_ok=True)
            before = snapshot(reports)
            t0 = clock()
            kind, code = run(leg_command(leg, args, work), left, work / f"{leg.name}.log")
            took = clock() - t0
            if kind == "cut":
                print(f"cut   {leg.recipe}/{leg.pair} at the deadline after {took:.0f} s: dropped whole", flush=True)
                break
            files = new_files(reports, before)
            comparison = _comparison(reports, leg)
            line = pair_line(leg, comparison, took, deadline - clock(), served_verdict(reports, leg) or kind)
            status |= kind != "ok"
            if comparison is None and not leg.served and kind != "ok":  # nothing measured: the next sitting retries
                print(f"{line} (exit {code}; log {env.shown_path(work / f'{leg.name}.log')})", flush=True)
                continue
            processes = 2 * args.rounds if not leg.served else 1
            manifest["legs"][leg.name] = asdict(Done(leg.recipe, leg.pair, leg.aa, round(took, 1), processes, line,
                                                    _relative(reports, leg), files))
            manifest["costs"][leg.name] = round(took if leg.served else took / processes, 2)
            manifest["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            write_bundle(bundle, manifest, reports)  # kept before it is said
            print(line if kind == "ok" else f"{line} (exit {code}; log {env.shown_path(work / f'{leg.name}.log')})",
                  flush=True)
    print(f"tour: {len(manifest['legs'])} pair(s) in {env.shown_path(bundle)}; analyse anywhere: "
          f"make finalize BUNDLE={env.shown_path(bundle)}", flush=True)
    return 1 if status else 0


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
