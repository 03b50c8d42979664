"""What the measured child writes: a run's RunResult and its parts (timing, memory, evidence, the roofline)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common.analysis.device import DeviceProfile
from common.analysis.results import Record, optional


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
    sizes: dict | None = optional()  # the workload's own sizes beyond the image's (a GPT's context, layers, ...)
    row_samples: int | None = optional()  # samples in one row of a batch where more than one (a sequence's tokens)
    sample: str | None = optional()  # what a sample is where it is not one row (a GPT's: a token)

    @property
    def samples_per_step(self) -> int:
        """What a step's throughput counts: its rows, or every row's samples (a GPT's tokens)."""
        return self.batch_size * (self.row_samples or 1)

    @property
    def rate(self) -> str:
        """The throughput's unit: samples/s, or a GPT's tokens/s."""
        return f"{self.sample or 'sample'}s/s"


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
    attention: str | None = None  # the attention it ran, in words (common.analysis.attention)


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

