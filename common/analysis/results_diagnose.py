"""What `make diagnose-<workload>` writes: the four phases of a diagnosis and its findings."""
from __future__ import annotations

from dataclasses import dataclass, field

from common.analysis.results import Record
from common.analysis.results_run import Bursts, KindRow, OpRow


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

