"""The five stages of a run over one stream of batches (see common/harness.py), each a generator
that yields the script its batches and returns what it measured, used with `yield from`. They share
no state but what they are handed: the Feed that fetches batches, and the Phases that run.phase()
reads (the timed stage names its step there, the profiled stage turns on profiler ranges)."""
import contextlib
import itertools
import math
import sys
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import env
from common.analysis import attention, bursts, roofline, stats, traces
from common.analysis.results_run import Bursts, CompileStats, Evidence, PhaseEvidence, Summary, Timing, UnreadTrace
from common.measure import ceiling, cpu_time, hta, memory, tf32, trainstate
from common.measure.nvtx import Ranges, kernel_window
from common.measure.profiling import mark_rank, memory_artifacts, op_views, profiler, trace_evidence
from common.measure.timing import DataTimer, PhaseTimer, StepTimer, synchronize
from common.render import trace_page

PHASES = ("data", "copy", "forward", "backward", "optimizer")  # "copy": host-to-device, where a script has one

MAX_STEPS = 20_000  # the most timed steps --min-time may ask for
PLAIN_STEPS = 10_000  # batches a plain run hands out at most (env.PLAIN_ENV)
SETTLE_S = 10.0  # the most seconds of untimed steps a loader's queue may take to drain to its steady level

Stage = Generator[Any, None, Any]  # yields the script's batches, returns what the stage measured


class Phases:
    """What run.phase() needs to know of the stage under way. `step`: the timed step in progress,
    set by the timed stage only (the phase timer's row; None outside it). `profiling`: set by the
    profiled stage only, for a profiler range per phase."""

    def __init__(self, ranges: Ranges, timer: PhaseTimer | None):
        self.ranges, self.timer = ranges, timer
        self.step: int | None = None
        self.profiling = False

    @contextlib.contextmanager
    def range(self, name: str):
        """An NVTX range (CUDA) and, while profiling, a profiler range named after the phase."""
        timer, step = self.timer, self.step
        started = timer.start() if timer is not None and step is not None else None
        with self.ranges.range(name):
            if self.profiling:
                with torch.profiler.record_function(name):
                    yield
            else:
                yield
        if started is not None:
            timer.stop(step, name, started)


class Feed:
    """The script's batches as the stages hand them out: each fetched inside the "data" phase,
    counted (run.steps_run), the last one kept (the learning probe reuses it)."""

    def __init__(self, batches: Iterator, phases: Phases):
        self.batches, self.phases = batches, phases
        self.count, self.last = 0, None

    def __call__(self):
        self.count += 1
        with self.phases.range("data"):
            self.last = next(self.batches)
            return self.last


@dataclass
class WarmUp:
    steps: int
    wall_s: float
    first_step_s: float | None
    step_s: float | None  # wall time per step after the first: sizes the timed stretch
    first_at: float | None = None  # time.time() at the first step's end (the timeline's "first step")
    period: int | None = None  # the warm-up's own step pattern repeats every this many steps


def warm_up(feed: Callable, device: torch.device, n: int, ranges: Ranges, setup_s: float) -> Stage:
    """Untimed steps, each waited for: the first holds compilation and autotuning; the pace of the
    others (pace()) sizes the timed stretch. `setup_s`: the one-time
    work run.setup() timed before the loop, counted like compilation in the wall and first-step times."""
    steps = []
    first_at = None
    t0 = last = time.perf_counter()
    for i in range(n):
        with ranges.range(f"warmup {i}"):
            yield feed()
        synchronize(device)  # note: this is a sync point, after each untimed warm-up step only
        now = time.perf_counter()
        first_at = first_at or time.time()
        steps.append(now - last)
        last = now
    wall = last - t0
    first = steps[0] + setup_s if steps else None
    per_step, period = pace(steps[1:])
    return WarmUp(n, wall + setup_s, first, per_step, first_at, period)


def pace(steps_s: list[float]) -> tuple[float | None, int | None]:
    """The pace of waited-for steps (seconds each) and their period where they repeat a pattern: the
    mean over whole periods where they do (a median would pick one mode), else the median (one step
    may record a CUDA graph, tens of ms against a step of 1 ms)."""
    period = bursts.period([x * 1000 for x in steps_s])
    if period:
        return float(np.mean(steps_s[:bursts.whole_periods(len(steps_s), period)])), period
    return (float(np.median(steps_s)) if steps_s else None), None


def whole(n: int, period: int | None, most: int = MAX_STEPS) -> int:
    """n steps rounded up to whole periods (never past `most`)."""
    if not period or n < period:
        return n
    return min(most - most % period, n + (-n) % period)


def timed_steps(warm: WarmUp, steps: int, min_time_s: float) -> int:
    """The preset's steps, or more when they would last less than min_time_s; a whole number of the
    warm-up's periods where its steps repeat a pattern (the figure spans whole periods)."""
    n = steps
    if min_time_s and warm.step_s:
        n = int(min(MAX_STEPS, max(steps, math.ceil(min_time_s / max(warm.step_s, 1e-6)))))
    return whole(n, warm.period)


def ready(source) -> int | None:
    """The batches a torch DataLoader's worker processes have delivered that its iterator has not
    handed out yet (its result queues and the out-of-order arrivals it keeps); None for any other
    stream, which queues nothing ahead of the step."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    if not isinstance(source, _MultiProcessingDataLoaderIter):
        return None
    try:
        queued = source._data_queue.qsize()
        if source._data_queue is not source._worker_result_queue:  # pinned: the pin thread's input too
            queued += source._worker_result_queue.qsize()
        return queued + sum(1 for info in source._task_info.values() if len(info) == 2)
    except (NotImplementedError, AttributeError):  # qsize() is not implemented on macOS
        return None


class Settling:
    """The rule that ends the untimed steps before a timed stretch: a DataLoader's queue of ready
    batches drained to its steady level. The warm-up's first step (compilation), the probe and each
    waited-for step let its workers fill it, and a stretch that starts on a fuller queue than after any
    other step times batches made before it began. Steady: at most a batch per worker ready (a loader
    that cannot keep up hands each batch out as it comes), or no new low for `patience` steps (a loader
    that keeps up keeps its queue full). A queue that drains slowly (workers almost as fast as the step)
    is followed for at most SETTLE_S seconds; what it still held is checked over the stretch (drained()).
    Inactive where the stream queues nothing (not a multi-process DataLoader iterator). For a loop the
    cookbook drives (settle()) or only watches (the doctor's): stepped() after each step, more() before
    the next."""

    def __init__(self, source, clock=time.perf_counter):
        self.source, self.steps, self.clock = source, 0, clock
        level = ready(source)
        self.active = level is not None
        if self.active:
            workers = source._num_workers
            self.limit = 4 * workers * (source._prefetch_factor or 2)
            self.floor, self.patience = max(2, workers), max(8, 2 * workers)
            self.lowest, self.since, self.level, self.t0 = level, 0, level, clock()

    def more(self) -> bool:
        return (self.active and self.steps < self.limit and self.level > self.floor and self.since < self.patience
                and self.clock() - self.t0 < SETTLE_S)

    def stepped(self) -> None:
        self.steps += 1
        level = ready(self.source)
        if level is None:
            self.active = False
            return
        self.level = level
        self.lowest, self.since = (level, 0) if level < self.lowest else (self.lowest, self.since + 1)


def settle(feed: Callable, source, ranges: Ranges) -> Stage:
    """Untimed steps, not waited for, until a DataLoader's queue has drained to its steady level
    (Settling); returns the steps run."""
    settling = Settling(source)
    while settling.more():
        with ranges.range(f"settle {settling.steps}"):
            yield feed()
        settling.stepped()
    return settling.steps


def drained(before: int | None, after: int | None, n: int) -> str | None:
    """Where a loader's queue held more ready batches when the stretch began than when it ended, by more
    than 5% of its steps: those steps took batches made before the stretch, and the figure is up to that
    share fast. The warning that says so, else None."""
    if before is None or after is None or n <= 0 or before - after <= 0.05 * n:
        return None
    return (f"the DataLoader's queue held {before} ready batches when the timed stretch began and {after} when it "
            f"ended: up to {(before - after) / n:.0%} of its {n} steps took batches made before it, so its figure "
            "may be that much fast (more steps, --min-time, would dilute it)")


def timed(feed: Callable, device: torch.device, n: int, batch_size: int, warm: WarmUp, phases: Phases,
          watch: contextlib.AbstractContextManager, source=None, mark=lambda name: None) -> Stage:
    """n steps between CUDA events (perf_counter on a CPU) read once after the last, the batch's
    fetch timed apart (timing.DataTimer), the GPU watched (`watch`, a GpuMonitor); no profiler.
    First, with the timers made, where `source` is a DataLoader's iterator whose workers ran ahead,
    untimed steps until its queue drains (settle(); none for a distributed run, whose ranks must run the
    same steps); its level at the stretch's start and end is checked (drained()). The figure is the
    stretch's time over its steps, over whole periods where the steps repeat a pattern (figure()); the
    loader's workers name a burst's cause. Returns (Timing, the peak Memory of these steps)."""
    timer, data = StepTimer(device, n), DataTimer(device, n)
    kernel_step = env.kernel_step()
    with watch:
        if source is not None:
            yield from settle(feed, source, phases.ranges)
            mark("settle")
        memory.reset_peak(device)
        before, cpu = ready(source), cpu_time.Clock()
        t0 = time.perf_counter()
        for i in range(n):
            timer.start(i)
            phases.step = i
            with phases.ranges.range(f"step {i}"), kernel_window(device, i == kernel_step):
                data.start(i)
                batch = feed()
                data.stop(i)
                yield batch
            timer.stop(i)
        phases.step = None
        after = ready(source)
        step_ms = timer.step_ms()  # the one sync of the timed stretch, after its last step
    wall_s = time.perf_counter() - t0
    cpu_ms, worker_cpu_ms = cpu.ms_per_step(n)
    peak = memory.timed_peak(device, phases.timer)
    host_median_ms, host_share, wait_share = data.shares(step_ms, wall_s)
    phase_ms = phases.timer.phase_ms() if phases.timer is not None else None
    # without the phase timer, the fetch's own time per step still tells a data-bound burst apart
    workers = getattr(source, "_num_workers", None)
    fig = figure(step_ms, timer, batch_size, phase_ms or {"data": fetch_ms(data)}, workers)
    timing = Timing(step_ms=step_ms, summary=fig.summary, warmup_steps=warm.steps,
                    warmup_s=warm.wall_s, first_step_s=warm.first_step_s, timed_wall_s=wall_s,
                    cpu_ms_per_step=cpu_ms, worker_cpu_ms_per_step=worker_cpu_ms,
                    host_data_ms_median=host_median_ms, host_data_share=host_share, data_wait_share=wait_share,
                    bursts=fig.bursts, whole_steps=fig.whole_steps, queue_drained=drained(before, after, n))
    if phase_ms is not None:
        timing.phase_ms = {p: stats.summarize(ms, batch_size) for p, ms in phase_ms.items()}
        timing.phase_peak_mb = phases.timer.peaks or None  # CUDA only
    return timing, peak


def fetch_ms(data: DataTimer) -> list[float]:
    """The fetch's time per step: on CUDA the GPU's wait across it (DataTimer's events: the host's time
    includes blocking on a full launch queue), on a CPU the host's. Call after the timed loop's sync."""
    return data.device_ms() or data.host_ms()


@dataclass
class Figure:
    summary: Summary  # mean_ms is the figure
    bursts: Bursts | None
    whole_steps: int | None  # the steps the figure spans, where fewer than all


def figure(step_ms: list[float], timer: StepTimer, batch_size: int, phase_ms: dict | None = None,
           workers: int | None = None) -> Figure:
    """A process's figure from its timed steps: the stretch's wall time (the step clock's, first
    start to last end) over its steps, over whole periods of the steps' own pattern (a stretch of 25
    steps that alternate 4 and 128 ms holds 13 of one and 12 of the other: its whole 24 steps give
    the true mean); the steps' pattern as a finding where they come in bursts."""
    n = len(step_ms)
    found = bursts.find(step_ms, phase_ms, workers)
    whole = bursts.whole_periods(n, found.period if found else None)
    summary = stats.summarize(step_ms, batch_size, timer.stretch_ms(whole))
    return Figure(summary, found, whole if whole < n else None)


def profiled(feed: Callable, device: torch.device, steps: int, trace_dir: Path, worker: str,
             memory_dir: Path | None, phases: Phases, optimizers=(), mark=lambda name: None,
             later: bool = False) -> Stage:
    """torch.profiler over 1 warm-up + `steps` active steps: the trace and its Evidence (None with
    no profiled steps); with a memory folder, the memory timeline and (CUDA) snapshot. Never timed.
    later: the trace left unread (an UnreadTrace, read after the run by read_trace), so that the
    process ends seconds sooner. mark(name) as the steps, the trace's export and its reading end."""
    if not steps:
        return None
    snapshot = memory_dir is not None and device.type == "cuda"
    if snapshot:
        memory.record_history()  # allocations with their Python stacks
    with profiler(trace_dir, worker, device, steps, with_stack=memory_dir is not None) as prof:
        phases.profiling = True
        for i in range(steps + 1):  # +1: the profiler's own warm-up step
            yield feed()
            if i == steps:
                mark("profile")  # the last step's host work is done; this prof.step() collects and exports
            prof.step()
            mark_rank(prof)
        phases.profiling = False
    mark("export")
    found = unread(prof, device, steps, optimizers)
    if memory_dir is not None:
        found.memory = memory_artifacts(prof, memory_dir, worker, device, snapshot)
    if not later:
        found = read_trace(found)
    mark("analysis")
    return found


def read_evidence(prof, device: torch.device, steps: int | None = None, optimizers=()) -> Evidence:
    """What a finished profiler's trace shows, per step (see read_trace). `steps`: the profiled steps
    (default: as many as the profiler recorded)."""
    return read_trace(unread(prof, device, steps, optimizers))


def unread(prof, device: torch.device, steps: int | None, optimizers=()) -> UnreadTrace:
    """What only this process can tell of its profiled window: the profiler's op tables, this device's
    ceilings, TF32 as it ran, the optimizers' parameters. The rest is in the trace (read_trace)."""
    averages = prof.key_averages()
    n = steps or max(sum(1 for e in averages if e.key.startswith("ProfilerStep#")), 1)
    return UnreadTrace(trace=str(prof.trace_path), device=device.type, steps=n,
                       views=op_views(averages, device, n, set(PHASES)), ceilings=ceiling.for_run(device),
                       tf32=list(tf32.state()), params=trainstate.parameter_elements(optimizers))


def read_trace(u: UnreadTrace) -> Evidence:
    """The evidence of a profiled window, from its trace and what its process recorded: the trace's
    counts and times, the seed's op views, HTA's reading, each op against the device's ceilings (the
    roofline; the optimizers' parameters size its foreach and fused ops) and each kernel's time; and
    writes the trace's page beside it (common.render.trace_page). The same on any machine, so a trace
    read after its run gives what the run would have written."""
    device = torch.device(u.device)  # a type only: no CUDA is touched
    found = trace_evidence(u.trace, device, PHASES)
    found["phases"] = {p: PhaseEvidence(**v) for p, v in found["phases"].items()}
    events, traced = traces.profiled(u.trace)
    roof = roofline.of_events(events, traced, device.type == "cuda", u.ceilings, tuple(u.tf32), u.params)
    return Evidence(trace=u.trace, **found, views=u.views, memory=u.memory, hta=hta.read(u.trace, device),
                    roofline=roof, kernel_ms=roofline.kernel_ms(events, traced), page=trace_page.beside(u.trace),
                    attention=attention.reading(events))


def counted(feed: Callable, recorded_flops: float | None) -> Stage:
    """One step under FlopCounterMode: the FLOPs a step really executes, recomputation included.
    A replayed CUDA graph runs no aten ops for the counter to see: then `recorded_flops`, the count
    common.graphs took of the same step when it recorded it, else no count rather than 0."""
    counter = FlopCounterMode(display=False, custom_mapping=_rules_torch_lacks())
    with eager_compiled(), counter, warnings.catch_warnings():
        # FlexAttention run eagerly warns that it is not compiled: this one step runs so on purpose
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield feed()
    return counter.get_total_flops() or recorded_flops


def probed(feed: Feed, device: torch.device, steps: int, ranges: Ranges, optimizers) -> Stage:
    """The learning probe, for parity: `steps` steps on one batch (a copy of the last warm-up one),
    which any model soon fits, so a twin that stops learning shows in a few steps at any batch size
    (aggregate.parity). It starts where the warm-up ends, which both twins reach alike, so both probe
    from the same state however many steps each then times. Then the training state of `optimizers`
    (trainstate.Stepped: parameters, gradients, optimizer state) is put back, so that the probe's
    steps do not bend the trajectory that parity compares; the batches and random numbers it drew
    stay drawn, alike in both twins. Each probe step draws (and drops) a batch, as a step does, so
    that a loader's prefetch queue is no fuller when the timing starts than after any other step."""
    if not steps:
        return
    saved = trainstate.save(optimizers)
    batch = _copied(feed.last if feed.last is not None else feed())
    for i in range(steps):
        with ranges.range(f"probe {i}"):
            feed()
            yield batch
    trainstate.restore(saved)
    synchronize(device)  # note: this is a sync point, before the timed steps (the probe is never timed)


def _copied(batch):
    """A batch's tensors copied (a loader may hand out the next batch in the same buffer)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, (tuple, list)):
        return type(batch)(_copied(b) for b in batch) if type(batch) in (tuple, list) else batch
    if isinstance(batch, dict):
        return {k: _copied(v) for k, v in batch.items()}
    return batch


def _rules_torch_lacks() -> dict:
    """FLOP rules for the operators FlopCounterMode refuses, where the step can call them: FlexAttention's,
    whose module a script using it has imported."""
    if "torch.nn.attention.flex_attention" not in sys.modules:
        return {}
    from common.measure import flex_flops
    return flex_flops.FORMULAS


def eager_compiled():
    """A context in which torch.compile'd code runs eagerly, for the FLOP-counted step: compiled
    code cannot run under the counter's dispatch mode (with fullgraph=True it is an error). The same
    arithmetic, counted (torch.compiler.set_stance: torch 2.6, the floor of requirements.txt)."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def plain_run(batches, prog: str) -> Stage:
    """Under the doctor (env.PLAIN_ENV): batches unmeasured, as many as a training run would draw (the
    doctor stops the script once it has measured); then the script ends, since its code after the loop
    reads the run's measurements, which a plain run has none of."""
    source = iter(batches)
    yield from itertools.islice(source, PLAIN_STEPS)
    shut_down(source)
    print(f"{prog}: the loop ended (plain run under the doctor)", flush=True)
    raise SystemExit(0)


def shut_down(source) -> None:
    """Stop a DataLoader's worker processes now. Left to interpreter exit, persistent workers are
    joined one by one after the queues they listen on are gone: on the H100 host, 15 workers took
    about 75 s to join (5 s each), for a 2 s run."""
    shutdown = getattr(source, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def nbytes(batch) -> int:
    """The bytes of a batch's tensors (a served request's size)."""
    tensors = batch if isinstance(batch, (tuple, list)) else (batch,)
    return sum(t.nelement() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def compile_stats() -> CompileStats | None:
    """What torch.compile did in this process, when it was used: graphs captured, graph breaks, and
    recompilations. Dynamo captures one graph per compiled callable, one more per graph break, and
    one more per recompilation (a guard failed: a new shape, a new dtype), so for the one compiled
    model of a recipe, recompilations = graphs - 1 - breaks."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    graphs = counters["stats"].get("unique_graphs", 0)
    if not graphs:
        return None
    breaks = sum(counters["graph_break"].values())
    return CompileStats(graphs=graphs, graph_breaks=breaks, recompiles=max(0, graphs - 1 - breaks),
                        # mode="reduce-overhead" skips CUDA graphs silently (a mutated input, a CPU tensor...)
                        cudagraph_skips=counters["inductor"].get("cudagraph_skips", 0),
                        break_reasons=[r.splitlines()[0][:200] for r in counters["graph_break"]][:5],
                        cache_hits=counters["inductor"].get("fxgraph_cache_hit", 0)
                        + counters["aot_autograd"].get("autograd_cache_hit", 0),
                        cache_misses=counters["inductor"].get("fxgraph_cache_miss", 0)
                        + counters["aot_autograd"].get("autograd_cache_miss", 0))
