"""Where this runs, without torch: the repository, its commit, the results and data folders, the cores."""
import datetime as dt
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
REPORTS = REPO_ROOT / "reports"  # tracked: what a GPU sitting's make finalize commits
# where every local run's reports go unless told otherwise: untracked, so that a run leaves the checkout
# clean and its stamps undirty; make clean removes it whole
LOCAL_REPORTS = REPORTS / "local"
# set by the doctor's child (common.measure.observer): a harness script runs as a plain one, its
# loop handing out batches without measuring, so that the doctor's measurement is the only one
PLAIN_ENV = "COOKBOOK_PLAIN"
KERNEL_STEP_ENV = "COOKBOOK_KERNEL_STEP"  # the timed step make ncu-<recipe> profiles (common.runners.ncu)
# set by the recipe runner for each child: its role and round, "fast:3" (under --aa the slow script
# plays both roles); fault injection (common.measure.faults) reads it
RUN_ENV = "COOKBOOK_RUN"
FAULT_ENV = "COOKBOOK_FAULT"  # faults planted for the tests (common.measure.faults)
# a simulated GPU's profile in place of this device's (common.measure.device): T4, P100, A100, H100
DEVICE_PROFILE_ENV = "COOKBOOK_DEVICE_PROFILE"
ZYGOTE_ENV = "COOKBOOK_ZYGOTE"  # the test suite's zygote socket: children forked warm (common.measure.zygote)
# what a sitting already probed once for its runners (make tour): {"gpus": N, "profile": {...}, "ceiling": true}
DEVICE_SEEN_ENV = "COOKBOOK_DEVICE_SEEN"
OFFLINE_ENV = "COOKBOOK_OFFLINE"  # 1: skip the network sources of data (common.workloads.datasource)
DATA_DECIDED_ENV = "COOKBOOK_DATA_DECIDED"  # where a parent (the tour) decided each data set's source once
# "shared": the cold-start pairs keep Inductor's and Triton's default caches instead of empty ones (the test
# suite: its smoke runs check the pipeline, and an empty cache costs a minute of C++ compilation per process)
COMPILE_CACHE_ENV = "COOKBOOK_COMPILE_CACHE"
# a pipelined child's gate (common.measure.gate): when it may start its device work, and on which cores
GATE_ENV = "COOKBOOK_GATE"
PIPELINE_ENV = "COOKBOOK_PIPELINE"  # 0: no child prepares while another runs (the runners' launch.Pipeline)


@dataclass
class Gate:
    """A pipelined child's gate (common.measure.gate), as its runner writes it in GATE_ENV."""
    wait: str | None  # the file whose existence lets this process start its device work (None: at once)
    release: str  # the file this process creates once its own device work is done
    runner: int  # the runner's pid: once it is gone, no gate will open, and the process ends
    cpus: list[int]  # the cores of the measured work

    def to_env(self) -> str:
        return json.dumps({"wait": self.wait, "release": self.release, "runner": self.runner, "cpus": self.cpus})


def gate() -> Gate | None:
    """This process's gate (GATE_ENV), or None where it was started without one (a process on its own)."""
    said = os.environ.get(GATE_ENV)
    if not said:
        return None
    try:
        d = json.loads(said)
        return Gate(wait=d["wait"], release=str(d["release"]), runner=int(d["runner"]),
                    cpus=[int(c) for c in d["cpus"]])
    except (ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{GATE_ENV}: not a gate ({e})") from None


def run_id() -> str:
    """A name for one invocation's results folder: UTC time and pid, so that runs never collide."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


def kernel_step() -> int | None:
    """The timed step whose kernels a kernel profiler records (KERNEL_STEP_ENV), or None."""
    value = os.environ.get(KERNEL_STEP_ENV, "")
    return int(value) if value.isdigit() else None


def data_dir() -> Path:
    """Cache folder for downloads, synthetic stand-ins and the matmul ceilings (COOKBOOK_DATA_DIR overrides)."""
    return Path(os.environ.get("COOKBOOK_DATA_DIR", REPO_ROOT / "data"))


def shown_path(path) -> str:
    """A path as a reader can use it: relative to the repository when it lies inside it."""
    p = Path(path)
    return str(p.relative_to(REPO_ROOT)) if p.is_absolute() and p.is_relative_to(REPO_ROOT) else str(p)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str:
    commit = _git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return commit


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_set() -> list[int]:
    """The cores this process may run on (the runner pins every child to the same set)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def device_name(e) -> str:
    """A Stamp's device in a few words: the GPU's name, or "CPU (<model>)"; "?" without a stamp."""
    return "?" if e is None else e.gpu_name if e.device_type == "cuda" else f"CPU ({e.cpu})"


def describe_device(env) -> str:
    """A result's Stamp as a one-line label; CPU results always say CPU."""
    if env.device_type == "cuda":
        return f"{env.gpu_name} (driver {env.driver or '?'}, CUDA {env.cuda})"
    return f"CPU: {env.cpu} x{env.cpu_count} (not a GPU result)"


def cpu_ranges(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5'"""
    out, cpus = [], sorted(cpus)
    for c in cpus:
        if out and c == out[-1][1] + 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)


def rank_world() -> tuple[int, int]:
    """(rank, world size) as torchrun set them; (0, 1) in a plain process."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
