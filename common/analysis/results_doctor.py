"""What `make doctor` writes: a user's own script as the observer saw it, the fixes tried, the verdict."""
from __future__ import annotations

from dataclasses import dataclass, field

from common.analysis.results import Record, optional
from common.analysis.results_compare import BreakEven, Speedup
from common.analysis.results_diagnose import Diagnosis
from common.analysis.results_run import RunResult


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
    # attention written by hand: softmaxes per step over a T x T tensor of scores, and the largest T
    hand_attention: float | None = optional()
    hand_attention_t: int | None = optional()


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

