"""What compare and climb write: a variant over its processes, a comparison of two twins, a ladder's rungs."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field

from common.analysis.device import DeviceProfile
from common.analysis.results import Record, optional
from common.analysis.results_run import (
    Bursts,
    Ceilings,
    CompileStats,
    Config,
    DataSource,
    Evidence,
    GpuReport,
    Load,
    Memory,
    Oom,
    Stamp,
    Summary,
    UnreadTrace,
)


@dataclass
class HostFigures(Record):
    """The host's side of a variant: each the median over its processes of the Timing field of the same name."""
    first_step_s: float | None = None
    data_wait_share: float | None = None
    host_data_share: float | None = None
    host_data_ms_median: float | None = None
    cpu_ms_per_step: float | None = None
    worker_cpu_ms_per_step: float | None = None


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
    # the facts of the rule's `same` both twins recorded alike (a GPT's causal attention), by name
    agreed: dict | None = optional()
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

