"""Typed results: one JSON file per run, versioned and written atomically (temp file + rename).

A run writes a `RunResult`; the runners aggregate a variant's processes into a `VariantAggregate`;
`make recipe-<name>` writes a `Comparison`, `make ladder` a `LadderSummary`. Each is a dataclass
with `to_json()` and `from_json()`, tied to SCHEMA_VERSION: a file of another version is one line
that says which file, which version and what to re-run, never a KeyError deep in a report.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import tempfile
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from common.analysis.device import DeviceProfile
from common.errors import CookbookError

SCHEMA_VERSION = 3  # 1: plain dicts; 2: never released; 3: these dataclasses, statistics over processes


# --- atomic files ------------------------------------------------------------------------------
def umask() -> int:
    """The process's umask, read without a window where it is changed where Linux tells it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, and put it back at once
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write data so that readers see either the old file or the whole new one, never a part. The
    file gets the mode open() would give it (0644 under the usual umask), not mkstemp's 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise CookbookError(f"cannot write to {path.parent}: {e.strerror}; choose a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True):
    """An advisory lock (flock) on path, created with its folder if missing; False when non-blocking and
    held elsewhere."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no data/ yet
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- dataclasses <-> JSON ----------------------------------------------------------------------
def optional(default=None):
    """A field left out of the JSON while it is None: its producer writes the key only when it has
    a value, and the files keep that shape."""
    return field(default=default, metadata={"optional": True})


class Record:
    """Base of every result dataclass: to_json() / from_json() through the type hints."""

    def to_json(self) -> dict:
        return _encode(self)

    @classmethod
    def from_json(cls, data: dict):
        return _decode(cls, data)


def _encode(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("optional") and getattr(value, f.name) is None)}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _decode(tp, value):
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (typing.Any,)
        return [_decode(item, v) for v in value]
    if origin is tuple:
        return tuple(value)
    if origin is dict:
        _, item = typing.get_args(tp) or (str, typing.Any)
        return {k: _decode(item, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        renamed = getattr(tp, "RENAMED", {})  # a field's older name, in files written before it changed
        value = {renamed.get(k, k): v for k, v in value.items()}
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _decode(hints[k], v) for k, v in value.items() if k in names})
    return value


def write_result(path: Path, record: Record) -> None:
    data = {"schema_version": SCHEMA_VERSION, "type": type(record).__name__, **record.to_json()}
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CookbookError(f"cannot read result {path}: {e}") from None


def read_result(path: Path, cls, rerun: str = "make recipe-<name>"):
    """The record in `path`, or one line naming the file, its schema and the command to re-run."""
    data = read_json(path)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CookbookError(f"{path} has schema_version {version!r}, this code reads {SCHEMA_VERSION}: "
                            f"re-run `{rerun}` to write it again")
    return cls.from_json(data)


# --- a run ---------------------------------------------------------------------------------------
@dataclass
class Summary(Record):
    """Statistics of step times in ms. `mean_ms` is the process's figure: the timed stretch's wall
    time over its steps, over whole periods of whatever repeats in it (common.analysis.stats); the
    median, percentiles and CV describe single steps."""
    n: int
    median_ms: float
    mean_ms: float
    std_ms: float
    cv: float
    p95_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    throughput_per_s: float


@dataclass
class Config(Record):
    batch_size: int
    steps: int
    warmup: int
    profile_steps: int
    image_size: int | None
    seed: int
    data: str | None
    min_time_s: float = 0.0  # steps were added until the timed stretch lasted this long
    probe_steps: int = 0  # learning-probe steps after the run (measure.stages.probed)


@dataclass
class Stamp(Record):
    """The environment every result carries."""
    device_type: str
    gpu_name: str | None
    gpu_memory_gb: float | None
    driver: str | None
    cuda: str | None
    cudnn: int | None
    tf32_matmul: bool
    tf32_cudnn: bool
    cudnn_benchmark: bool
    float32_matmul_precision: str
    torch: str
    torchvision: str | None
    python: str
    cpu: str
    cpu_count: int | None
    cpu_set: list[int]
    torch_threads: int
    date: str
    git_commit: str
    profile: DeviceProfile | None = optional()  # what the device can do (common.analysis.device)


@dataclass
class Bursts(Record):
    """Steps that come in bursts (common.analysis.bursts): a period, or two modes, with the likely cause."""
    period: int | None  # steps per repeat, where the pattern repeats; None: two modes without a period
    pattern_ms: list[float]  # the mean of each place in the period, or [the fast mode, the slow mode]
    slow_share: float  # the share of steps in the slow mode
    cause: str | None  # "loader workers", "the data pipeline", "a scheduled step", "a periodic host sync"
    words: str  # the finding as the report and the terminal say it


@dataclass
class Timing(Record):
    step_ms: list[float]
    summary: Summary
    warmup_steps: int
    warmup_s: float
    first_step_s: float | None
    timed_wall_s: float
    cpu_ms_per_step: float
    worker_cpu_ms_per_step: float | None
    host_data_ms_median: float | None  # host time inside next(batches), per step
    host_data_share: float | None  # ... as a share of the timed wall time
    data_wait_share: float | None  # the device starved for data (CUDA: GPU time in the data phase; CPU: = host)
    phase_ms: dict[str, Summary] | None = None
    phase_peak_mb: dict[str, float] | None = None
    bursts: Bursts | None = optional()  # where the steps come in bursts
    whole_steps: int | None = optional()  # the steps the figure spans: whole periods of the pattern
    queue_drained: str | None = optional()  # a loader's queue fuller at the stretch's start than its end (why)


@dataclass
class Memory(Record):
    kind: str  # "cuda_allocator" or "cpu_peak_rss"
    peak_mb: float  # max allocated on CUDA, the process's peak RSS on CPU: the one number compared
    reserved_mb: float | None = None

    def label(self) -> str:
        return "peak MB (allocated)" if self.kind == "cuda_allocator" else "peak MB (CPU RSS)"


@dataclass
class OpRow(Record):
    """One op of key_averages(), per profiled step."""
    name: str
    calls: float
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float | None  # None on a CPU run
    self_mem_bytes: float


@dataclass
class KindRow(Record):
    """One kind of op (measure.profiling.OP_KINDS) summed, per profiled step: its time under the
    view's key, the device's on CUDA, the CPU's on a CPU."""
    name: str
    self_device_us: float | None = optional()
    self_cpu_us: float | None = optional()
    calls: float = 0.0


@dataclass
class OpView(Record):
    key: str  # the OpRow field the rows are sorted by
    rows: list[OpRow]


@dataclass
class KindView(Record):
    key: str  # the KindRow field that holds the time
    rows: list[KindRow]


@dataclass
class OpViews(Record):
    """The seed's four op tables and the time per kind of op (measure.profiling.op_views)."""
    device_time: OpView  # self CPU time on a CPU run
    self_memory: OpView
    cpu_time: OpView
    calls: OpView
    by_kind: KindView


@dataclass
class MemoryArtifacts(Record):
    """The memory timeline and (CUDA) allocator snapshot written over the profiled steps; absent
    where torch could not write them, with the reason in notes."""
    timeline: str | None = optional()
    snapshot: str | None = optional()
    view_snapshot: str | None = optional()  # how to open the snapshot
    notes: list[str] = field(default_factory=list)


@dataclass
class HtaReading(Record):
    """HolisticTraceAnalysis's reading of a profiled trace (measure.hta.read): a second opinion
    beside ours. Unavailable, only `why` is set."""
    available: bool
    why: str | None = optional()
    version: str | None = optional()
    steps: int | None = optional()  # the profiled steps HTA analysed
    idle_share: float | None = optional()
    compute_share: float | None = optional()
    non_compute_share: float | None = optional()
    idle_host_wait_share: float | None = optional()  # shares of the idle time
    idle_kernel_wait_share: float | None = optional()
    blocked_on_full_queue_ms_per_step: float | None = optional()
    note: str | None = optional()
    launches_per_step: float | None = optional()  # absent where HTA found no kernel launches
    launch_delay_us_median: float | None = optional()
    launch_cpu_us_median: float | None = optional()


@dataclass
class PhaseEvidence(Record):
    host_ms: float
    ops: float
    kernels: float | None
    kernel_ms: float | None


@dataclass
class Evidence(Record):
    """What the profiler saw over the profiled steps, per step."""
    trace: str
    profiled_steps: int
    ops_per_step: float
    syncs_per_step: float
    sync_ops_per_step: dict[str, float]
    sync_ms_per_step: float | None  # host time blocked in sync calls
    kernels_per_step: float | None
    gpu_idle_share: float | None
    gpu_busy_ms_per_step: float | None
    launch_ms_per_step: float | None  # host time in CUDA launch calls
    idle_host_busy_ms_per_step: float | None  # GPU idle while the host runs ops (not data, not a sync)
    # a profiled step's length (CUDA: to the GPU's last work; the profiler slows steps a little)
    profiled_step_ms: float | None
    sync_apis_per_step: dict[str, float] | None
    memcpy_per_step: float | None
    phases: dict[str, PhaseEvidence]
    views: OpViews
    memory: MemoryArtifacts | None = None
    hta: HtaReading | None = None
    roofline: Roofline | None = None
    # every op's time per step (GPU: its kernels'), and every kernel's, by name: for the trace diff
    op_ms: dict[str, float] = field(default_factory=dict)
    kernel_ms: dict[str, float] = field(default_factory=dict)
    page: str | None = None  # the trace's own HTML page, beside it (common.render.trace_page)


@dataclass
class UnreadTrace(Record):
    """A profiled window whose trace is read after the run, on any machine (`make tour`'s children:
    make finalize reads it), with what the reading needs that only the process knew; then it becomes
    the Evidence the process would have written (common.measure.stages.read_trace)."""
    trace: str
    device: str  # "cuda" or "cpu"
    steps: int  # profiled steps
    views: OpViews  # the profiler's own tables (key_averages), which only the process holds
    ceilings: Ceilings | None  # this device's, for the roofline
    tf32: list[bool]  # (matmuls, convolutions) as the process ran them
    params: dict[str, int]  # the optimizers' parameter elements by dtype (trainstate.parameter_elements)
    memory: MemoryArtifacts | None = None


@dataclass
class Oom(Record):
    batch_size: int
    stage: str
    message: str


@dataclass
class OutOfMemory(Record):
    """A script the doctor ran that ran out of memory: where in its run, the error, and on CUDA the
    allocator's figures at the failure and the snapshot of its history (the doctor's second run)."""
    env: Stamp | None
    device: str  # which memory ran out, as the error says: "cuda", "cpu", or "other" (MPS, XPU)
    stage: str  # the doctor's stage when it did: warm-up, timed, profiled, flop count
    steps_seen: int
    message: str
    requested_mb: float | None = None  # the segment the allocator tried to reserve: the request, rounded up
    allocated_mb: float | None = None  # in the script's tensors then
    reserved_mb: float | None = None  # held by the caching allocator then (allocated, and cached free blocks)
    inactive_split_mb: float | None = None  # free, inside split blocks it cannot release (fragmentation)
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF had it on
    free_mb: float | None = None  # the device's free memory, as CUDA said then
    allowed_mb: float | None = None  # the device's memory, or the cap set_per_process_memory_fraction set
    at_failure: bool = False  # the figures as the allocator last failed (else: as the error reached the doctor)
    snapshot: str | None = None
    view_snapshot: str | None = None
    notes: list[str] = field(default_factory=list)


def oom_path(out: Path) -> Path:
    """Where the doctor's run of a script that ran out of memory leaves its OutOfMemory: beside its --out."""
    return Path(out).with_name(Path(out).stem + ".oom.json")


@dataclass
class DataSource(Record):
    """Where a run's data came from (workloads.datasource.source); synthetic data is never presented as real."""
    kind: str  # "real", "local" or "synthetic"
    location: str | None = None
    note: str = ""
    synthetic: bool = False
    rows: int | None = optional()  # Telco: the table's rows, features and churn rate
    features: int | None = optional()
    churn_rate: float | None = optional()
    images: int | None = optional()  # CIFAR-10: the train split's images and classes
    classes: int | None = optional()


@dataclass
class CompileStats(Record):
    """What torch.compile did in a process (measure.stages.compile_stats), and the one-time setup a
    script timed before its loop (run.setup: a hand-captured CUDA graph), seconds by name. Each part
    is absent where it did not happen."""
    graphs: int | None = optional()
    graph_breaks: int | None = optional()
    recompiles: int | None = optional()
    cudagraph_skips: int | None = optional()  # mode="reduce-overhead" fell back to plain kernels
    break_reasons: list[str] | None = optional()
    setup_s: dict[str, float] | None = optional()
    # the on-disk caches' answers while compiling (Inductor's FX graph cache, AOTAutograd's): a warm
    # cache from an earlier process shortens the first step; see common.compile_cache
    cache_hits: int | None = optional()
    cache_misses: int | None = optional()


@dataclass
class GpuReport(Record):
    """NVML over the timed steps (measure.gpu_monitor.GpuMonitor.report). Unavailable (no pynvml, no
    GPU): only the notice that says why."""
    available: bool
    samples: int | None = optional()
    gpu_util_mean: float | None = optional()
    mem_used_mb_max: float | None = optional()
    temp_c_max: float | None = optional()
    power_w_mean: float | None = optional()
    power_limit_w: float | None = optional()
    sm_clock_mhz: list[int] | None = optional()  # [min, max]
    mem_clock_mhz: list[int] | None = optional()  # [min, max]
    pstates: list[int] | None = optional()
    throttle_reasons: list[str] | None = optional()
    other_pids: list[int] | None = optional()
    warnings: list[str] = field(default_factory=list)
    notice: str | None = None


ANSWERS_KEPT = 8  # served batches whose answers a result keeps for parity (a few thousand numbers)


@dataclass
class Randomness(Record):
    """How a run's dropout drew its masks (common.measure.dropout.SharedMasks, harness.Run.loop): over its
    first `shared_steps` losses and the learning probe, every mask as an fp32 input of its shape gets it,
    whatever the twin's dtype; `calls`: the dropouts seen there, on inputs of `dtypes` (none: no dropout
    in Python's reach, such as a replayed CUDA graph's or a compiled one's); `reseeded_at`: the loss from
    which an A/A's second role draws another dropout stream (the noise a precision change is judged against)."""
    shared_steps: int = 0
    calls: int = 0
    dtypes: list[str] = field(default_factory=list)
    reseeded_at: int | None = None
    per_dtype: bool = False  # this device's own dropout draws per dtype (CUDA; a simulated GPU's stand-in)


@dataclass
class RunResult(Record):
    recipe: str
    workload: str  # churn or resnet18
    pair: str  # the pair's name: the workload, or workload_scenario (churn_serving)
    variant: str
    status: str  # "ok" or "oom"
    device: str
    smoke: bool
    config: Config
    env: Stamp
    data_source: DataSource | None
    notices: list[str]
    total_s: float
    timing: Timing | None = None
    memory: Memory | None = None
    evidence: Evidence | None = None
    flops_per_step: float | None = None
    bytes_per_step: float | None = None  # serving: request + answer bytes moved per step
    compile: CompileStats | None = None
    gpu_monitor: GpuReport | None = None
    warnings: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    probe_losses: list[float] = field(default_factory=list)  # the learning probe (measure.stages.probed), for parity
    # steps of `losses` that made no optimizer update (a GradScaler found inf/NaN), and the probe's count
    skipped_steps: list[int] = field(default_factory=list)
    probe_skipped: int = 0
    # serving: every request's answer, in order, for the first ANSWERS_KEPT batches after the warm-up
    answers: list[list[float]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    oom: Oom | None = None
    # the process's phases (common.measure.timeline): seconds from its start to each phase's end, and
    # that start on time.time()'s clock
    timeline: dict[str, float] = optional()
    started: float | None = optional()
    forked: bool | None = optional()  # forked from a server that had imported torch (common.measure.zygote)
    randomness: Randomness | None = optional()
    unread: UnreadTrace | None = optional()  # evidence still to read from its trace
    load: Load | None = optional()  # other processes' CPU use on this run's cores during its timed steps


# --- a variant over processes, a comparison, a ladder ------------------------------------------------
@dataclass
class HostFigures(Record):
    """The host's side of a variant: each the median over its processes of the Timing field of the same name."""
    first_step_s: float | None = None
    data_wait_share: float | None = None
    host_data_share: float | None = None
    host_data_ms_median: float | None = None
    cpu_ms_per_step: float | None = None
    worker_cpu_ms_per_step: float | None = None


@dataclass
class Load(Record):
    """Other processes' CPU use on the cores a measurement ran on, while it ran (common.measure.contention)."""
    others_cores: float  # their CPU seconds per second of wall time: 1.0 is one core kept busy
    cores: int  # the cores the measuring process could use
    wall_s: float
    threads: int | None = None  # torch's threads in the measuring process
    own_cores: float | None = None  # the measuring process's own CPU (its children's included), per second

    @property
    def busy(self) -> bool:
        """Whether others took half a core or more while the cores were all in demand (theirs and this
        run's own CPU together within half a core of the cores it could use): then they took time the
        run would have had. A window under MIN_WALL_S is too short for the kernel's 10 ms ticks to say."""
        if self.wall_s < MIN_WALL_S or self.others_cores < BUSY_CORES:
            return False
        return self.own_cores is None or self.others_cores + self.own_cores >= self.cores - BUSY_CORES

    def words(self) -> str:
        return f"other processes used {self.others_cores:.2f} of the {self.cores} core(s) this run could use"


BUSY_CORES = 0.5
MIN_WALL_S = 0.5


@dataclass
class Ceilings(Record):
    """The device's measured ceilings (python -m common.measure.ceiling): matmul TFLOP/s per dtype, for
    MFU and the roofline, and memory bandwidth in GB/s. `gpu`: the GPU's name, or the CPU's ("CPU ...")."""
    gpu: str | None = None
    bf16_tflops: float | None = None  # measured only where native (common.analysis.device: ceiling_dtypes)
    tf32_tflops: float | None = None
    fp32_tflops: float | None = None
    fp16_tflops: float | None = optional()
    how: str | None = None
    date: str | None = None
    bandwidth_gbs: float | None = None  # a large copy's bytes read and written, per second
    load: Load | None = optional()  # the machine's load while they were measured: a busy one's are not reused


@dataclass
class OpRoof(Record):
    """One op (by name and dtype) of a roofline, per step (analysis.roofline)."""
    name: str
    kind: str  # matmul, convolution, attention, normalisation, reduction, elementwise, optimizer
    dtype: str
    calls: float
    flops: float
    bytes: float
    ms: float  # its kernels' time (GPU), its own span (CPU)
    roof_ms: float | None  # max(FLOPs / compute ceiling, bytes / bandwidth): the time at the limit
    bound: str | None  # "compute" or "memory": the side of the ridge it sits on

    @property
    def reached(self) -> float | None:
        """The share of its limit the op reaches: roofline time over its time."""
        return self.roof_ms / self.ms if self.roof_ms and self.ms > 0 else None


@dataclass
class Roofline(Record):
    """The roofline of the profiled steps, per step: the modelled ops, the time no model covers."""
    ops: list[OpRoof]
    busy_ms: float  # the GPU's busy time (CPU: the top-level ops' time)
    modelled_ms: float  # of which the modelled ops
    roof_ms: float | None  # the modelled ops at their roofline
    unmodelled_ms: dict[str, float] = field(default_factory=dict)  # op name -> time no model covers
    steps: int = 1
    device: str = "cpu"
    ceilings: Ceilings | None = None


MEAN, MEDIAN = "mean step", "median step"  # a variant's statistic: this version's, and older files'


@dataclass
class VariantAggregate(Record):
    """One variant over its processes. The process is the unit: its figure is the median of the
    per-process figures, each the timed stretch's time over its steps (Summary.mean_ms; `statistic`
    says so, and files written before say "median step"); the pooled steps give the single steps'
    median and tail (p95, p99)."""
    RENAMED: typing.ClassVar[dict] = {"process_medians_ms": "process_ms", "median_ms": "step_ms"}
    status: str  # "ok" or "oom"
    config: Config
    env: Stamp
    data_source: DataSource | None
    notices: list[str]
    warnings: list[str]
    oom: Oom | None = None
    process_ms: list[float] = field(default_factory=list)  # each process's figure, ms per step
    step_ms: float | None = None  # the variant's figure: the median of process_ms
    statistic: str = MEDIAN  # what each process's figure is: MEAN from this version on
    between_cv: float | None = None  # spread of the per-process figures
    within_cv: float | None = None  # median of the per-process CVs
    pooled: Summary | None = None
    throughput_per_s: float | None = None
    warmup_s: list[float] = field(default_factory=list)
    bursts: list[Bursts | None] = field(default_factory=list)  # each process's step pattern, where it had one
    load: Load | None = optional()  # the busiest process's: other processes' CPU on its cores while it timed
    host: HostFigures = field(default_factory=HostFigures)
    memory: Memory | None = None
    evidence: Evidence | None = None
    flops_per_step: float | None = None
    bytes_per_step: float | None = None
    compile: CompileStats | None = None
    gpu_monitor: GpuReport | None = None
    ceiling: Ceilings | None = None
    extra: dict = field(default_factory=dict)  # what the script added to its (first) result
    unread: UnreadTrace | None = optional()  # evidence still to read (common.measure.unread)


@dataclass
class Speedup(Record):
    """The slow twin's figure over the fast twin's, over processes, with a 95% interval over processes."""
    ratio: float
    low: float | None
    high: float | None
    method: str
    processes: list[int]  # slow, fast
    verdict: str  # "faster", "slower", "no meaningful difference", "undecided"
    floor: float
    level: float = 0.95  # each look's level: above 95% when the runner may look several times (Pocock)
    looks: int = 1


@dataclass
class Parity(Record):
    ok: bool
    what: str
    rtol: float
    why: str | None = None
    early_max_rel: float | None = None
    early_steps: int = 0
    early_rtol: float = 0.0
    max_rel: float | None = None
    at_step: int = 0
    window: int = 0
    steps: int = 0
    finite: bool = True
    windows_compared: bool = True
    batch_size: int = 0  # the early tolerance depends on it (aggregate.early_tolerance)
    probe_steps: int = 0  # the learning probe: steps on one batch, both twins
    probe_max_rel: float | None = None
    probe_rtol: float = 0.0
    probe_drop: float | None = None  # how far the slow twin cut its probe loss, as a share of where it began
    probe_fast_drop: float | None = None  # how far the fast twin cut its own
    # the fast twin's skipped updates (fp16's loss scale calibrating): early steps and probe not compared
    skipped_steps: list[int] = field(default_factory=list)
    early_skipped: bool = False
    # where the twins' dropout draws other masks after the stretch they share (aggregate.masks_differ): the
    # step it ends, from which windows are judged against a reseeded twin's spread; the rule's own window tolerance
    masks_shared_until: int | None = optional()
    window_rtol: float | None = optional()
    # serving: each request's answer against the slow twin's, in order (aggregate.answers_parity)
    atol: float = 0.0
    max_abs: float | None = None
    at_answer: tuple[int, int] = (0, 0)  # (batch, request) of the largest difference
    answers_compared: int = 0


@dataclass
class Failure(Record):
    what: str  # "churn fast", "rung 3"
    round: int
    returncode: int
    log: str
    tail: list[str]
    seconds: float


@dataclass
class BreakEven(Record):
    """After how many steps the twin with the larger one-time cost (compilation) is repaid by its
    faster steps (common.analysis.coldstart): each end of the interval from the one-time cost's and the
    step saving's intervals over processes. `case` says which way the twins cross, in coldstart.CASES."""
    case: str  # "pays after", "ahead until", "ahead throughout", "never pays", "undecided"
    steps: float | None  # the point: mean one-time cost difference / mean step saving
    low: float | None = None
    high: float | None = None  # None with a low: unbounded (the step saving's interval reaches 0)
    extra_s: float | None = None  # the fast twin's one-time cost less the slow twin's, s (mean over processes)
    saved_ms: float | None = None  # the slow twin's step less the fast twin's, ms (mean of the process medians)
    run_steps: int | None = None  # the steps one measured process ran (warm-up and timed)


@dataclass
class ColdStart(Record):
    """What a compiled pair costs before its steps pay: the time from each process's start to its
    first finished step, that start's speedup over processes, the one-time costs and the break-even."""
    slow_first_s: list[float]
    fast_first_s: list[float]
    first: Speedup | None  # time to first step, slow over fast (above 1: the fast twin starts sooner)
    slow_one_time_s: list[float]
    fast_one_time_s: list[float]
    break_even: BreakEven | None
    fresh: bool = True  # each process a fresh interpreter (False: forked with torch imported)
    cache: dict | None = optional()  # the fast twin's compile cache (common.compile_cache): loaded, bytes, refused


@dataclass
class WorkloadComparison(Record):
    slow: VariantAggregate | None = None
    fast: VariantAggregate | None = None
    speedup: Speedup | None = None  # the headline: per step, or time to first step where `measure` says so
    parity: Parity | None = None
    rounds_reason: str = ""
    measure: str = "step"  # "step" or "first step" (a cold-start recipe: its spec's measure)
    steps: Speedup | None = optional()  # where the headline is the first step: the steady steps' speedup
    cold: ColdStart | None = optional()  # where a twin compiled


@dataclass
class ComparisonRounds(Record):
    """How many processes a comparison ran per variant, and how it judged them."""
    least: int | None = None
    most: int | None = None
    fixed: bool = False  # --rounds or smoke: no more processes added until the interval decides
    looks: int = 1
    level: float | None = None  # each look's level (stats.sequential_level)
    floor: float | None = None  # "no meaningful difference" inside +-floor
    method: str | None = None
    cpus: list[int] = field(default_factory=list)


@dataclass
class BudgetSearch(Record):
    """One twin's largest batch under the memory budget (runners.budget.search)."""
    fits: int | None = None  # the largest batch that trained (None: not even the start)
    fails: int | None = None  # the smallest that ran out of memory (None: up to budget.MAX_BATCH all trained)
    probes: list[tuple[int, str]] = field(default_factory=list)  # (batch, "ok" | "oom" | "failed")


@dataclass
class MemoryBudget(Record):
    """checkpointing: the largest batch each twin trains under a memory budget, or the note why it was not searched."""
    pair: str
    budget_gb: float
    note: str | None = optional()
    slow: BudgetSearch | None = optional()
    fast: BudgetSearch | None = optional()


@dataclass
class Comparison(Record):
    recipe: str
    title: str
    evidence_keys: list[str]
    smoke: bool
    device: str
    command: str
    results_dir: str
    workloads: dict[str, WorkloadComparison]
    failures: list[Failure]
    rounds: ComparisonRounds = field(default_factory=ComparisonRounds)
    budget: MemoryBudget | None = None
    aa: bool = False  # an A/A: the pair's slow script in both roles (compare --aa), the noise floor
    # the device lacks what the technique needs: nothing was timed ("not applicable on Tesla T4 (sm_75): no TF32")
    not_applicable: str | None = optional()
    profile: DeviceProfile | None = optional()


@dataclass
class Rung(Record):
    index: int
    id: str
    name: str
    adds: str
    status: str  # "ok", "oom", "failed", "skipped"
    aggregate: VariantAggregate | None = None
    cumulative: float | None = None  # throughput against rung 0
    incremental: Speedup | None = None  # against the rung below
    parity: Parity | None = None
    skipped: str | None = optional()  # why it did not run: "not applicable on Tesla P100 (sm_60): ..."
    # the first rung that compiles, against the rung below at the same batch: when compiling is repaid
    break_even: BreakEven | None = optional()


@dataclass
class LadderRounds(Record):
    rounds: int | None = None  # processes per rung
    cpus: list[int] = field(default_factory=list)
    method: str | None = None


@dataclass
class LadderSummary(Record):
    workload: str
    what: str
    mode: str
    command: str
    rungs: list[Rung]
    failures: list[Failure]
    rounds: LadderRounds = field(default_factory=LadderRounds)


# --- a sweep ----------------------------------------------------------------------------------
@dataclass
class Point(Record):
    """One point of a sweep: the pair at one value of the knob."""
    value: int
    slow: VariantAggregate | None = None
    fast: VariantAggregate | None = None
    speedup: Speedup | None = None
    parity_ok: bool | None = None
    failed: list[str] = field(default_factory=list)
    parity_failure: str = ""  # aggregate.parity_failure's words where parity failed


@dataclass
class SweepResult(Record):
    """`make sweep-<recipe>`: the pair across the knob that decides whether its technique pays."""
    recipe: str
    title: str
    pair: str
    knob: str
    flag: str
    mode: str
    rounds: int
    command: str
    points: list[Point]
    crossover: str = ""
    not_applicable: str | None = optional()  # the device lacks what the technique needs: no point was timed


# --- a diagnosis ------------------------------------------------------------------------------
@dataclass
class Finding(Record):
    """One suspect of `make diagnose-<workload>`, with what it costs and the recipes that address it."""
    kind: str
    cost: float  # the share of step time it costs, measured
    says: str
    recipes: list[str] = field(default_factory=list)


@dataclass
class DiagnosisOps(Record):
    """Phase 4 of a diagnosis: the time per kind of op and the top ops, per profiled step."""
    key: str | None = None  # the time's field: self_device_us, self_cpu_us on a CPU; None without a trace
    top: list[OpRow] = field(default_factory=list)
    by_kind: list[KindRow] = field(default_factory=list)


@dataclass
class Baseline(Record):
    """Phase 1 of a diagnosis: the run's headline figures (metrics.py's readings of its aggregate)."""
    batch_size: int
    median_ms: float  # of single steps
    p95_ms: float
    cv: float
    throughput: float
    peak_mb: float
    tflops: float | None = None
    mfu: float | None = None
    step_ms: float | None = None  # the figure: the timed stretch's time over its steps
    bursts: Bursts | None = None  # where the steps came in bursts


@dataclass
class Bottleneck(Record):
    """Phase 2: what each suspect costs as a share of the step, and the signals behind the costs."""
    step_ms: float
    costs: dict[str, float]
    gpu_util: float | None = None
    syncs_per_step: float | None = None
    sync_ms_per_step: float | None = None
    gpu_idle_share: float | None = None
    host_data_share: float | None = None


@dataclass
class Component(Record):
    """Phase 3: one phase of the step (--phase-timing), its mean, share and peak memory (CUDA)."""
    phase: str
    mean_ms: float
    share: float | None
    peak_mb: float | None = None


@dataclass
class Diagnosis(Record):
    """The seed's four phases read from one --phase-timing run; the verdict is the costliest finding's words."""
    baseline: Baseline
    bottleneck: Bottleneck
    components: list[Component]
    operations: DiagnosisOps
    findings: list[Finding]
    verdict: str


# --- the doctor: a user's own script, measured from outside (make doctor) -------------------------
@dataclass
class LoaderSettings(Record):
    """A DataLoader the script drew batches from, as it was built."""
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None = None
    processes: bool | None = None  # whether its batches came from worker processes (its iterator's kind)
    batches_per_epoch: int | None = optional()  # len(loader), where its dataset has a length


@dataclass
class OpsSeen(Record):
    """What the profiled steps' ops say of the script's settings (measure.settings.read), per step."""
    matmul_dtypes: dict[str, float] = field(default_factory=dict)  # dtype -> calls per step
    conv_dtypes: dict[str, float] = field(default_factory=dict)
    conv_layouts: dict[str, float] = field(default_factory=dict)  # "channels_last" / "NCHW" -> calls per step
    optimizer: str | None = None  # "for-loop", "foreach" or "fused": the ops inside its step
    zero_grad: str | None = None  # "set_to_none" or "zeroes": the ops inside Optimizer.zero_grad


@dataclass
class LossScaling(Record):
    """The doctor's fp16 loss scaling as it ran (common.measure.fixes.LossScale)."""
    first: float  # the scale it started from
    last: float  # the scale after the script's last step
    steps: int  # optimizer steps it checked
    skipped: int  # of them, those whose gradients overflowed: they updated nothing
    refused: str | None = optional()  # why it stopped scaling (the script's own GradScaler, fp16 parameters...)


@dataclass
class Observation(Record):
    """What `python -m common.measure.observer` saw of a script: its steps, settings and measurements."""
    script: str
    argv: list[str]
    step: str  # what ended a step: "optimizer", "forward" or "batch"
    steps_seen: int
    ended: str  # "stopped" (measured enough), "script ended", "script exited", "no step"
    stage: str  # the stage the script was in when it ended
    optimizers: list[str] = field(default_factory=list)
    optimizer_flags: dict[str, dict] = field(default_factory=dict)  # name -> {"foreach": ..., "fused": ...} as built
    zero_grad: str | None = None  # "set_to_none" or "zeroes", from the script's zero_grad calls
    models: list[str] = field(default_factory=list)  # the top-level modules called
    model_calls: int = 0
    batches: int = 0
    loaders: list[LoaderSettings] = field(default_factory=list)
    result: RunResult | None = None  # None: too few steps were measured
    ops: OpsSeen | None = None
    fixes: dict[str, str] = field(default_factory=dict)  # --fix name -> "applied" or why not (measure.fixes)
    cwd: str | None = optional()  # the folder the script ran in (its relative paths are read from there)
    # "file:line" of the script's own folder -> host reads of a tensor per profiled step (measure.syncs)
    sync_lines: dict[str, float] = field(default_factory=dict)
    loss_scaling: LossScaling | None = optional()  # where --fix amp ran in fp16


@dataclass
class Gain(Record):
    """What the compute itself could gain: a setting seen, the recipe that changes it, and why."""
    kind: str  # "16-bit", "TF32", "channels_last", "fused optimizer", "set_to_none", "compile", ...
    says: str
    recipes: list[str] = field(default_factory=list)


@dataclass
class Trial(Record):
    """One fix tried on the user's script (make doctor FLAGS='--try'), or the winners together."""
    fix: str  # its --try name, or "together" for the winners combined
    recipe: str  # the recipe that teaches it ("" for the combination)
    how: str  # how it was applied from outside
    verdict: str  # faster, slower, no (significant|meaningful) difference, not applied/applicable/tried, crashed
    why: str = ""  # the evidence that it took effect; or why it was not applied, not tried, or how it crashed
    speedup: Speedup | None = None  # against the unchanged script, over the processes of the same rounds
    memory_kind: str | None = None
    memory_before_mb: float | None = None  # peak over the timed steps, the highest of its processes
    memory_after_mb: float | None = None
    parity_ok: bool | None = None
    parity: str = ""  # the losses compared, in words
    # a compiling fix: after how many steps its faster steps repay its compilation (common.analysis.coldstart)
    break_even: BreakEven | None = optional()
    lines: list[str] = field(default_factory=list)  # what to add to the script, from the recipe's diff
    fixes: list[str] = field(default_factory=list)  # the fixes applied together (one, or the winners)
    label: str = ""  # how the headline names it ("4 loader workers"); the fixes' names where empty


@dataclass
class Trials(Record):
    """What --try measured: each fix against the unchanged script, in fresh processes, alternating."""
    budget_s: float
    spent_s: float
    rounds: int  # the most rounds any fix ran
    stopped: str  # why the rounds ended
    deterministic: bool | None  # whether two unchanged runs gave the same losses (None: one run only)
    noise: str  # the unchanged runs' difference, in words
    rows: list[Trial] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)  # what cannot be applied from outside: "file:line: code (recipe)"
    headline: str = ""


@dataclass
class DoctorVerdict(Record):
    """The doctor's reading: the baselines' diagnosis of the measured run, then the gains the settings leave."""
    headline: str
    diagnosis: Diagnosis
    gains: list[Gain] = field(default_factory=list)
    blind: list[str] = field(default_factory=list)  # what this run could not see (a CPU: no kernels, ...)
