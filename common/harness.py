"""What a recipe script touches: `run = harness.start(__file__, __doc__)`, then `run.loop(...)`,
`run.phase(...)`, `run.log_loss(...)` and `run.finish()`. All measuring lives here.

A run has five consecutive stages over one stream of batches, each a small generator that hands
the script its batches and returns what it measured:
  warm-up  (untimed, each step waited for; its wall time, compile time included, is reported on its
           own line, with any one-time setup the script timed before the loop: `run.setup(name)`,
           a hand-captured CUDA graph's warm-up and recording)
  timed    (per-step CUDA events or perf_counter, read once after the loop; no profiler)
  profiled (torch.profiler, 1 warm-up + N active steps -> trace + evidence; never timed)
  counted  (one step under FlopCounterMode: the FLOPs a step really executes, recomputation included)
  probe    (more steps on the last batch, for the parity check's learning probe; never timed)
"""
import contextlib
import math
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import catalog, cli, env, presets
from common.analysis import stats
from common.analysis.results import Config, Evidence, Oom, PhaseEvidence, RunResult, Timing, write_result
from common.errors import EXIT_OOM, CookbookError
from common.measure import cpu_time, faults, hta, memory, stamp
from common.measure.gpu_monitor import GpuMonitor
from common.measure.nvtx import Ranges
from common.measure.profiling import mark_rank, memory_artifacts, op_views, profiler, trace_evidence
from common.measure.timing import DataTimer, PhaseTimer, StepTimer, synchronize

PHASES = ("data", "copy", "forward", "backward", "optimizer")  # "copy": host-to-device, where a script has one

MAX_STEPS = 20_000  # the most timed steps --min-time may ask for


# the allocator's words, and the CUDA libraries' when they cannot allocate their own workspace:
# CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED, CUFFT_ALLOC_FAILED, CUSOLVER_STATUS_ALLOC_FAILED ...
OOM_WORDS = ("out of memory", "can't allocate memory", "ALLOC_FAILED")
# what cuDNN and cuBLAS say near a memory cap, in other words: no engine whose workspace fits, a
# handle that could not be created. Without a cap these are genuine errors (an unsupported
# configuration), so they count as out of memory only when the run capped its memory.
CAPPED_OOM_WORDS = ("unable to find an engine", "CUDNN_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_NOT_INITIALIZED")


def is_oom(exc: BaseException, capped: bool = False) -> bool:
    """Did this run out of memory? `capped`: the run's memory is capped (--memory-budget-gb took
    effect), where cuDNN's "no engine" and cuBLAS's failed handle mean the workspace did not fit."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc)
    return any(w in text for w in OOM_WORDS) or (capped and any(w in text for w in CAPPED_OOM_WORDS))


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill ends like Ctrl-C: nothing half-written


class _Hooks:
    """The process-wide handlers of a harness script: input problems are one line, not a stack
    trace; running out of memory is a result; anything else keeps its trace."""

    def __init__(self, prog: str):
        self.prog, self.run = prog, None

    def uncaught(self, exc_type, exc, tb):
        if issubclass(exc_type, CookbookError):
            print(f"{self.prog}: error: {exc}", file=sys.stderr)
            sys.exit(2)
        if issubclass(exc_type, KeyboardInterrupt):
            print(f"{self.prog}: interrupted: no result written", file=sys.stderr)
            sys.exit(130)
        if self.run is not None and is_oom(exc, capped=self.run.memory_cap_gb is not None):
            self.run.write_oom(exc)
            sys.exit(EXIT_OOM)
        sys.__excepthook__(exc_type, exc, tb)


@contextlib.contextmanager
def process_hooks(prog: str):
    """Install the exception hook and the SIGTERM handler; restore the previous ones on exit."""
    hooks = _Hooks(prog)
    saved = sys.excepthook, signal.getsignal(signal.SIGTERM)
    sys.excepthook = hooks.uncaught
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield hooks
    finally:
        sys.excepthook = saved[0]
        signal.signal(signal.SIGTERM, saved[1])


def resolve_device(choice: str) -> tuple[torch.device, list[str]]:
    if choice == "cuda" and not torch.cuda.is_available():
        raise CookbookError(f"--device cuda: CUDA is not available here (torch {torch.__version__}); "
                            "use --device cpu or --device auto")
    if choice == "auto" and not torch.cuda.is_available():
        return torch.device("cpu"), ["CUDA not available: ran on CPU (numbers are CPU numbers)"]
    return torch.device("cuda" if choice in ("auto", "cuda") else "cpu"), []


def _writable_dir(path: Path, what: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise CookbookError(f"{what} {path} cannot be written ({e.strerror}); choose another folder") from None
    return path


def start(script_file: str, doc: str | None = None, argv: list[str] | None = None, extend=None) -> "Run":
    """extend(parser) may add a script's own flags (the ladder's --rung); they land in run.args.
    The process hooks stay installed until run.finish() (or run.close())."""
    path = Path(script_file).resolve()
    stack = contextlib.ExitStack()
    hooks = stack.enter_context(process_hooks(path.name))
    recipe, pair, workload, variant = catalog.identify(script_file)
    overrides = getattr(catalog.script_settings(script_file), "DEFAULTS", {})
    if path.is_relative_to(env.REPO_ROOT):
        hooks.prog = "python -m " + ".".join(path.relative_to(env.REPO_ROOT).with_suffix("").parts)
    parser = cli.script_parser(hooks.prog, doc or "", workload, overrides, pair)
    if extend is not None:
        extend(parser)
    args = parser.parse_args(argv)
    run = Run(recipe, workload, variant, args, overrides, hooks.prog, pair)  # input errors: one line, via the hook
    hooks.run, run._hooks = run, stack
    return run


@dataclass
class WarmUp:
    steps: int
    wall_s: float
    first_step_s: float | None
    step_s: float | None  # wall time per step after the first: sizes the timed stretch


class Run:
    def __init__(self, recipe, workload, variant, args, overrides, prog="harness", pair=None):
        self.recipe, self.workload, self.variant, self.prog = recipe, workload, variant, prog
        self.pair = pair or workload  # churn_serving: a second churn pair of the same recipe
        self.args = args
        self.device, self.notices = resolve_device(args.device)
        self.smoke = args.smoke
        mode = "smoke" if args.smoke else self.device.type
        sizes = presets.defaults(workload, mode, overrides, self.pair)
        pick = lambda key: getattr(args, key, None) if getattr(args, key, None) is not None else sizes.get(key)  # noqa: E731
        self.batch_size, self.steps, self.warmup = pick("batch_size"), pick("steps"), pick("warmup")
        self.profile_steps, self.image_size = pick("profile_steps"), pick("image_size")
        self.probe_steps = pick("probe_steps")
        self.min_time_s = pick("min_time")
        self.seed, self.data = args.seed, args.data
        self.memory_dir = Path(args.memory_dir) if args.memory_dir else None
        name = f"{self.pair}_{variant}"
        self.out = Path(args.out or env.REPO_ROOT / "reports" / "results" / recipe / f"{name}.json")
        _writable_dir(self.out.parent, "output folder")
        self.trace_dir = Path(args.trace_dir or env.REPO_ROOT / "reports" / "traces" / recipe / name)
        if self.profile_steps:
            _writable_dir(self.trace_dir, "trace folder")
        self.data_source = None  # set by common.data
        self._ranges = Ranges(self.device)
        if self._ranges.kind == "off":
            self.notices.append("NVTX ranges off: no CUDA device")
        self._profiling = False
        self._phase_timer = PhaseTimer(self.device) if args.phase_timing else None
        self._timed_step = None  # the index of the timed step under way, for the phase timer
        self.stage = "setup"
        self._monitor = None
        self._losses = []
        self._last_batch, self._probe_from = None, 0
        self._batch_bytes = self._output_bytes = None
        self.extra = {}  # anything a script adds to its result (a baseline's inference sweep, say)
        self.graph_flops = None  # set by common.graphs.capture: a recorded step's FLOPs, counted eagerly
        self.steps_run = 0  # batches the loop has handed out so far (warm-up and profiled included)
        self._stream = None
        self._warm = self._timing = self._evidence = self._flops = None
        self._memory = None
        self._hooks = None
        self._setup_s = {}  # one-time work timed by run.setup(name) before the loop, seconds by name
        self.memory_cap_gb = None  # set when --memory-budget-gb capped the allocator (CUDA)
        self._t_start = time.perf_counter()
        if args.memory_budget_gb:
            self._cap_memory(args.memory_budget_gb)
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)  # seeds CUDA too: the same weights in slow and fast
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)  # data order and crops

    def _cap_memory(self, gb: float) -> None:
        """As on a card with `gb` of memory: the allocator refuses beyond it (an out-of-memory result)."""
        if self.device.type != "cuda":
            self.notices.append(f"--memory-budget-gb {gb:g}: a memory budget needs CUDA; ignored on a CPU")
            return
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        # the allocator's cap: the CUDA context and libraries' workspaces come on top of it
        torch.cuda.set_per_process_memory_fraction(min(1.0, gb * 1e9 / total), index)
        self.memory_cap_gb = gb
        self.notices.append(f"GPU memory capped at {gb:g} GB of {total / 1e9:.0f} GB (--memory-budget-gb)")

    # --- used by the script -------------------------------------------------------------------
    @contextlib.contextmanager
    def setup(self, name: str):
        """One-time work a step needs before run.loop(), such as a hand-captured CUDA graph's warm-up
        and recording (common.graphs.capture wraps itself in it). Timed, kept in the result by name
        (result.compile["setup_s"]) and counted in the warm-up and first-step figures, where
        torch.compile's compilation lands on its own first step: the two one-time costs compare."""
        if self.steps_run:  # inside the loop its syncs would land in measured steps
            raise RuntimeError("run.setup() is for one-time work before run.loop()")
        synchronize(self.device)  # note: this is a sync point, before the loop (setup, never a timed step)
        stage, self.stage = self.stage, name  # running out of memory here reports this stage
        t0 = time.perf_counter()
        yield
        synchronize(self.device)  # note: this is a sync point, the setup's queued work done
        self._setup_s[name] = self._setup_s.get(name, 0.0) + time.perf_counter() - t0
        self.stage = stage

    @contextlib.contextmanager
    def phase(self, name: str):
        """An NVTX range (CUDA) and, while profiling, a profiler range named after the phase."""
        timer, step = self._phase_timer, self._timed_step
        started = timer.start() if timer is not None and step is not None else None
        with self._ranges.range(name):
            if self._profiling:
                with torch.profiler.record_function(name):
                    yield
            else:
                yield
        if started is not None:
            timer.stop(step, name, started)

    def log_loss(self, loss: torch.Tensor) -> None:
        """Keep the loss on the device (no sync); read once in finish() for the parity check."""
        self._losses.append(loss.detach())

    def log_output(self, output: torch.Tensor) -> None:
        """Serving scripts: the batch's mean output stands in for the loss in the parity check. Kept
        as a copy (a served answer may sit in a reused buffer) and reduced after the loop, so the
        step pays a small copy, not a reduction."""
        if self._output_bytes is None:
            self._output_bytes = output.nelement() * output.element_size()  # what goes back to the caller
        self._losses.append(output.detach().clone())

    def loop(self, batches):
        """Yield warm-up, timed, profiled and counted batches; each stage measures its own."""
        source = self._stream = iter(batches)
        fault = faults.planned(self.variant, self.pair, self.workload)
        if fault:
            self._stream = faults.wrap(self._stream, fault, at=self.warmup)
        self._warm = yield from self._warm_up()
        self._timing = yield from self._timed(self._warm)
        self._evidence = yield from self._profiled()
        self._flops = yield from self._counted()
        yield from self._probed()
        _shut_down(source)

    # --- the stages ---------------------------------------------------------------------------
    def _next(self):
        self.steps_run += 1
        with self.phase("data"):
            self._last_batch = next(self._stream)
            return self._last_batch

    def _warm_up(self):
        """Untimed steps, each waited for: the first holds compilation and autotuning; the median of
        the others sizes the timed stretch. Not their mean: one of them may record a CUDA graph
        (torch.compile's mode="reduce-overhead" does so on its second or third call), tens of ms
        against a step of 1 ms, and a mean would size the stretch from that."""
        self.stage = "warm-up"
        setup = sum(self._setup_s.values())  # run.setup() before the loop: one-time cost like compilation
        steps = []
        t0 = last = time.perf_counter()
        for i in range(self.warmup):
            with self._ranges.range(f"warmup {i}"):
                yield self._next()
            synchronize(self.device)  # note: this is a sync point, after each untimed warm-up step only
            now = time.perf_counter()
            steps.append(now - last)
            last = now
        wall = last - t0
        first = steps[0] + setup if steps else None
        per_step = float(np.median(steps[1:])) if len(steps) > 1 else None
        return WarmUp(self.warmup, wall + setup, first, per_step)

    def _timed_steps(self, warm: WarmUp) -> int:
        """The preset's steps, or more when they would last less than min_time_s."""
        if not self.min_time_s or not warm.step_s:
            return self.steps
        return int(min(MAX_STEPS, max(self.steps, math.ceil(self.min_time_s / max(warm.step_s, 1e-6)))))

    def _timed(self, warm: WarmUp):
        n = self._timed_steps(warm)
        memory.reset_peak(self.device)
        timer, data = StepTimer(self.device, n), DataTimer(self.device, n)
        self.stage = "timed steps"
        self._monitor = GpuMonitor(self.device)
        if self._monitor.notice:
            self.notices.append(self._monitor.notice)
        cpu0, workers0 = time.process_time(), cpu_time.children_s()
        t0 = time.perf_counter()
        with self._monitor:
            for i in range(n):
                timer.start(i)
                self._timed_step = i
                with self._ranges.range(f"step {i}"):
                    data.start(i)
                    batch = self._next()
                    data.stop(i)
                    yield batch
                timer.stop(i)
            self._timed_step = None
            step_ms = timer.step_ms()  # the one sync of the timed stretch, after its last step
        wall_s = time.perf_counter() - t0
        cpu_s, workers1 = time.process_time() - cpu0, cpu_time.children_s()
        if self._batch_bytes is None:
            self._batch_bytes = _nbytes(batch)
        self._memory = memory.peak(self.device)
        if self._phase_timer is not None and self._phase_timer.peaks:
            # the phase timer resets the allocator's peaks at every phase: the run's peaks are its
            self._memory.peak_mb = max(self._memory.peak_mb, *self._phase_timer.peaks.values())
            self._memory.reserved_mb = max(self._memory.reserved_mb or 0.0, self._phase_timer.reserved_peak_mb)
        host_ms, device_ms = data.host_ms(), data.device_ms()
        total_ms = sum(step_ms)
        timing = Timing(
            step_ms=step_ms, summary=stats.summarize(step_ms, self.batch_size), warmup_steps=warm.steps,
            warmup_s=warm.wall_s, first_step_s=warm.first_step_s, timed_wall_s=wall_s,
            cpu_ms_per_step=cpu_s * 1000 / n,
            worker_cpu_ms_per_step=((workers1 - workers0) * 1000 / n
                                    if workers0 is not None and workers1 is not None else None),
            host_data_ms_median=float(np.median(host_ms)),
            host_data_share=sum(host_ms) / (wall_s * 1000) if wall_s else None,
            # on CUDA the host's time in next() includes blocking on a full launch queue; the GPU's
            # time between events around next() is what it really waited for data (see timing.DataTimer)
            data_wait_share=(sum(device_ms) / total_ms if total_ms else None) if device_ms is not None
            else (sum(host_ms) / (wall_s * 1000) if wall_s else None))
        if self._phase_timer is not None:
            per_phase = self._phase_timer.phase_ms()
            timing.phase_ms = {p: stats.summarize(ms, self.batch_size) for p, ms in per_phase.items()}
            timing.phase_peak_mb = self._phase_timer.peaks or None  # CUDA only
        return timing

    def _profiled(self):
        self.stage = "profiled steps"
        if not self.profile_steps:
            return None
        worker = f"{self.pair}_{self.variant}"
        snapshot = self.memory_dir is not None and self.device.type == "cuda"
        if snapshot:
            torch.cuda.memory._record_memory_history(max_entries=100_000)  # allocations with stacks
        with profiler(self.trace_dir, worker, self.device, self.profile_steps,
                      with_stack=self.memory_dir is not None) as prof:
            self._profiling = True
            for _ in range(self.profile_steps + 1):  # +1: the profiler's own warm-up step
                yield self._next()
                prof.step()
                mark_rank(prof)
            self._profiling = False
        found = trace_evidence(prof.trace_path, self.device, PHASES)
        found["phases"] = {p: PhaseEvidence(**v) for p, v in found["phases"].items()}
        evidence = Evidence(trace=str(prof.trace_path), **found,
                            views=op_views(prof, self.device, self.profile_steps, set(PHASES)),
                            hta=hta.summarize(prof.trace_path, self.device))
        if self.memory_dir is not None:
            evidence.memory = memory_artifacts(prof, self.memory_dir, worker, self.device, snapshot)
        return evidence

    def _counted(self):
        self.stage = "flop count"
        counter = FlopCounterMode(display=False)
        with _eager_compiled(), counter:
            yield self._next()
        # a replayed CUDA graph runs no aten ops for the counter to see: the count common.graphs took
        # of the same step when it recorded it, else no count rather than 0
        return counter.get_total_flops() or self.graph_flops

    def _probed(self):
        """The learning probe, for parity: more steps on the last batch, which any model soon fits, so
        a twin that stops learning shows in a few steps at any batch size (aggregate.parity). Serving
        scripts learn nothing: no probe."""
        self.stage = "learning probe"
        self._probe_from = len(self._losses)
        if self._output_bytes is not None:
            return
        for _ in range(self.probe_steps):
            yield self._last_batch

    # --- results --------------------------------------------------------------------------------
    def _config(self) -> Config:
        return Config(batch_size=self.batch_size, steps=self.steps, warmup=self.warmup,
                      profile_steps=self.profile_steps, probe_steps=self.probe_steps, image_size=self.image_size,
                      seed=self.seed, data=self.data,
                      min_time_s=self.min_time_s or 0.0)

    def _result(self, status: str) -> RunResult:
        return RunResult(recipe=self.recipe, workload=self.workload, pair=self.pair, variant=self.variant,
                         status=status, device=self.device.type, smoke=self.smoke, config=self._config(),
                         env=stamp.take(self.device), data_source=self.data_source, notices=self.notices,
                         total_s=time.perf_counter() - self._t_start)

    def write_oom(self, exc: BaseException) -> None:
        """Out of memory is a result: which batch size, at which stage, with the allocator's words."""
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        result = self._result("oom")
        result.oom = Oom(batch_size=self.batch_size, stage=self.stage, message=message[:300])
        write_result(self.out, result)
        print(f"{self.prog}: out of memory at batch {self.batch_size} ({self.stage}): {message[:200]}", file=sys.stderr)

    def finish_timing(self) -> Timing:
        """The timed steps' statistics, for a script that derives numbers from them before finish()."""
        if self._timing is None:
            raise RuntimeError("run.finish_timing() before run.loop() ran to its end")
        return self._timing

    def finish(self) -> RunResult:
        if self._timing is None:
            raise RuntimeError("run.finish() before run.loop() ran to its end")
        # a loss is a scalar; a served batch's answers are reduced to their mean here, after the timing
        losses = torch.stack([x.float().mean() for x in self._losses]).cpu().tolist() if self._losses else []
        losses, probe_losses = losses[:self._probe_from], losses[self._probe_from:]
        gpu = self._monitor.summary() if self._monitor else {"available": False, "warnings": []}
        result = self._result("ok")
        result.timing, result.memory, result.evidence = self._timing, self._memory, self._evidence
        result.flops_per_step, result.gpu_monitor, result.warnings = self._flops, gpu, gpu["warnings"]
        result.losses, result.extra, result.compile = losses, self.extra, compile_stats()
        result.probe_losses = probe_losses
        if self._setup_s:  # a hand capture's one-time cost, beside what torch.compile did
            result.compile = {**(result.compile or {}), "setup_s": dict(self._setup_s)}
        if self._output_bytes is not None:  # serving: requests in, answers out
            result.bytes_per_step = (self._batch_bytes or 0) + self._output_bytes
        write_result(self.out, result)
        print(summary(result, self.out))
        self.close()
        return result

    def close(self) -> None:
        """Restore the process hooks start() installed."""
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None


def _eager_compiled():
    """A context in which torch.compile'd code runs eagerly, for the FLOP-counted step: compiled
    code cannot run under the counter's dispatch mode (with fullgraph=True it is an error). The same
    arithmetic, counted (torch.compiler.set_stance: torch 2.6, the floor of requirements.txt)."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def _shut_down(source) -> None:
    """Stop a DataLoader's worker processes now. Left to interpreter exit, persistent workers are
    joined one by one after the queues they listen on are gone: on the H100 host, 15 workers took
    about 75 s to join (5 s each), for a 2 s run."""
    shutdown = getattr(source, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def compile_stats() -> dict | None:
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
    return {"graphs": graphs, "graph_breaks": breaks, "recompiles": max(0, graphs - 1 - breaks),
            # mode="reduce-overhead" skips CUDA graphs silently (a mutated input, a CPU tensor...)
            "cudagraph_skips": counters["inductor"].get("cudagraph_skips", 0),
            "break_reasons": [r.splitlines()[0][:200] for r in counters["graph_break"]][:5]}


def _nbytes(batch) -> int:
    tensors = batch if isinstance(batch, (tuple, list)) else (batch,)
    return sum(t.nelement() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def summary(r: RunResult, out: Path) -> str:
    t, s, m, ev, cfg = r.timing, r.timing.summary, r.memory, r.evidence, r.config
    src = r.data_source or {}
    size = f", image {cfg.image_size}px" if cfg.image_size else ""
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
    mem = (f"{m.peak_mb:.0f} MB allocated ({m.reserved_mb:.0f} MB reserved)" if m.kind == "cuda_allocator"
           else f"{m.peak_mb:.0f} MB peak RSS (CPU, whole process)")
    longer = f" (more than the preset's {cfg.steps}: at least {cfg.min_time_s:g} s of steps)" if s.n > cfg.steps else ""
    setups = "".join(f"; {name} {sec:.3f} s before the loop, counted in both"
                     for name, sec in ((r.compile or {}).get("setup_s") or {}).items())
    lines = [
        f"{r.recipe}/{r.pair} {r.variant} on {env.describe_device(r.env)}",
        f"  data       {src.get('kind', '?')}{' - ' + src['note'] if src.get('note') else ''}",
        f"  setup      batch {cfg.batch_size}{size}, {s.n} timed steps{longer} after {t.warmup_steps} warm-up "
        f"steps ({t.warmup_s:.2f} s; the first step alone {fmt(t.first_step_s, '.2f')} s, compile included{setups})",
        f"  step time  median {s.median_ms:.3f} ms  p95 {s.p95_ms:.3f}  p99 {s.p99_ms:.3f}  "
        f"cv {s.cv:.1%}{'  NOISY' if stats.is_noisy(s.cv) else ''}",
        f"  throughput {s.throughput_per_s:.1f} samples/s",
        f"  host       waiting for data {fmt(t.data_wait_share, '.1%')} of the step time (host time in next(): "
        f"{fmt(t.host_data_share, '.1%')}); CPU {t.cpu_ms_per_step:.2f} ms/step in this process, "
        f"{fmt(t.worker_cpu_ms_per_step, '.2f')} in its workers",
        f"  memory     {mem}",
    ]
    if r.flops_per_step is not None:
        lines.append(f"  compute    {r.flops_per_step / 1e9:.3f} GFLOP per step (FlopCounterMode), "
                     f"{r.flops_per_step / s.median_ms / 1e9:.2f} TFLOP/s at the median step")
    if ev:
        lines.append(f"  evidence   syncs/step {ev.syncs_per_step:.1f}  kernels/step {fmt(ev.kernels_per_step, '.0f')}"
                     f"  ops/step {ev.ops_per_step:.0f}  GPU idle {fmt(ev.gpu_idle_share, '.0%')}")
        lines.append(f"  trace      {ev.trace}")
    lines += [f"  result     {out}"] + [f"  notice     {n}" for n in r.notices]
    lines += [f"  WARNING    {w}" for w in r.warnings]
    return "\n".join(lines)
