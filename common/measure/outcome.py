"""A run's result, assembled from what it recorded: once its loop has run to the end (run.finish) or when
it ran out of memory (run.write_oom). The Run fills one Measurements as its stages end; nothing here runs
inside the loop, so the reads that sync with the device (the losses, the skipped steps) come after it."""
import time
from dataclasses import dataclass, field

import torch

from common.analysis.results_run import (
    CompileStats,
    Evidence,
    Load,
    Memory,
    Oom,
    Randomness,
    RunResult,
    Timing,
    UnreadTrace,
)
from common.env import Gate
from common.measure import gate, stages, stamp, timeline
from common.measure.gpu_monitor import GpuMonitor


@dataclass
class Measurements:
    """What a run records as it goes, each part filled in as its stage ends; read once, by its result."""
    losses: list = field(default_factory=list)  # on the device, unread until the end: a loss or a batch's answers
    probe_span: tuple[int, int] = (0, 0)  # losses[a:b] are the learning probe's
    setup_s: dict = field(default_factory=dict)  # one-time work timed by run.setup(name) before the loop, by name
    randomness: Randomness | None = None  # how the dropout masks were drawn, once the loop has run
    load: Load | None = None  # other processes' CPU use on this run's cores during the timed steps
    monitor: GpuMonitor | None = None  # NVML, started with the timed steps
    timing: Timing | None = None
    memory: Memory | None = None  # the peak over the timed steps
    batch_bytes: int | None = None  # a timed batch's tensors (serving: the request)
    evidence: Evidence | UnreadTrace | None = None
    flops: float | None = None
    started: float = field(default_factory=time.perf_counter)  # a result's total_s counts from here


def base_result(run, status: str) -> RunResult:
    """What every result holds, an out-of-memory one too: which run, where, with which settings, when."""
    return RunResult(recipe=run.recipe, workload=run.workload, pair=run.pair, variant=run.variant,
                     status=status, device=run.device.type, smoke=run.smoke, config=run.config,
                     env=stamp.take(run.device), data_source=run.data_source, notices=run.notices,
                     total_s=time.perf_counter() - run.measured.started, started=run.timeline.started,
                     timeline=run.timeline.marks, forked=timeline.FORKED or None)


def oom_result(run, exc: BaseException) -> RunResult:
    """Out of memory is a result: which batch size, at which stage, with the allocator's words."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    result = base_result(run, "oom")
    result.oom = Oom(batch_size=run.batch_size, stage=run.stage, message=message[:300])
    return result


def finished_result(run, skips, gated: Gate | None) -> RunResult:
    """The result of a loop run to its end: its measurements, the losses parity compares (a serving run's
    answers: run.answers), the GPU monitor's report (leaving out the pipeline's other processes, `gated`'s
    siblings) and what the script added (run.extra). `skips`: the GradScaler's skipped steps (trainstate)."""
    m = run.measured
    # a loss is a scalar; a served batch's answers are reduced to their mean here, after the timing
    losses = torch.stack([x.float().mean() for x in m.losses]).cpu().tolist() if m.losses else []
    a, b = m.probe_span  # step k of `losses` is the k-th step outside the probe, in both twins
    losses, probe_losses = losses[:a] + losses[b:], losses[a:b]
    skipped = skips.steps()  # indices into every logged loss, the probe's included
    gpu = m.monitor.report(gate.siblings(gated))  # started with the timed steps, which finished
    result = base_result(run, "ok")
    result.timing, result.memory = m.timing, m.memory
    if isinstance(m.evidence, UnreadTrace):
        result.unread = m.evidence
    else:
        result.evidence = m.evidence
    result.flops_per_step, result.gpu_monitor, result.warnings = m.flops, gpu, gpu.warnings + (
        [m.timing.queue_drained] if m.timing.queue_drained else [])
    result.losses, result.extra, result.compile = losses, run.extra, stages.compile_stats()
    result.probe_losses, result.randomness, result.load = probe_losses, m.randomness, m.load
    if run.answers.serving:  # no probe; the answers and the bytes a request moves
        run.answers.settle(result, m.losses[b:], m.batch_bytes)
    result.skipped_steps = [i if i < a else i - (b - a) for i in skipped if not a <= i < b]
    result.probe_skipped = sum(a <= i < b for i in skipped)
    if m.setup_s:  # a hand capture's one-time cost, beside what torch.compile did
        result.compile = result.compile or CompileStats()
        result.compile.setup_s = dict(m.setup_s)
    return result
