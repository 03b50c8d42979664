"""What a recipe script touches: `run = harness.start(__file__, __doc__)`, then `run.loop(...)`,
`run.phase(...)`, `run.log_loss(...)` and `run.finish()`. The Run holds the settings (run.config),
runs the stages in order and writes the result; the stages themselves live in common/measure/stages.py.

A run has five consecutive stages over one stream of batches, each a small generator that hands
the script its batches and returns what it measured:
  warm-up  (untimed, each step waited for; its wall time, compile time included, is reported on its
           own line, with any one-time setup the script timed before the loop: `run.setup(name)`,
           a hand-captured CUDA graph's warm-up and recording)
  probe    (steps on one batch, for the parity check's learning probe: from where the warm-up
           ends, which both twins reach alike; the training state is then put back; never timed)
  timed    (per-step CUDA events or perf_counter, read once after the loop; no profiler)
  profiled (torch.profiler, 1 warm-up + N active steps -> trace + evidence; never timed)
  counted  (one step under FlopCounterMode: the FLOPs a step really executes, recomputation included)
"""
import contextlib
import itertools
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common import catalog, cli, data, env, presets, startup
from common.analysis.results import (
    ANSWERS_KEPT,
    CompileStats,
    Config,
    DataSource,
    Evidence,
    Memory,
    Oom,
    Randomness,
    RunResult,
    Timing,
    UnreadTrace,
    write_result,
)
from common.errors import EXIT_OOM
from common.measure import contention, dropout, faults, gate, memory, stages, stamp, timeline, trainstate
from common.measure import device as device_profile
from common.measure.gpu_monitor import GpuMonitor
from common.measure.nvtx import Ranges
from common.measure.process import is_oom, process_hooks, resolve_device, writable_dir
from common.measure.stages import MAX_STEPS, PHASES
from common.measure.terminal import summary
from common.measure.timeline import Timeline
from common.measure.timing import PhaseTimer, synchronize

IMPORTED_AT = time.time()  # torch and the harness imported: the timeline's "imports"
startup.check_torch(Path(sys.argv[0]).stem or "harness")  # an old torch: one line now, not an error at the run's end

PLAIN_STEPS = 10_000  # batches a plain run hands out at most (env.PLAIN_ENV)

# what scripts, common/ and the tests reach through `harness.`
__all__ = ["start", "Run", "resolve_config", "summary", "is_oom", "EXIT_OOM", "PHASES", "MAX_STEPS"]


def start(script_file: str, doc: str | None = None, argv: list[str] | None = None, extend=None) -> "Run":
    """extend(parser) may add a script's own flags (the ladder's --rung); they land in run.args.
    The process hooks stay installed until run.finish() (or run.close())."""
    path = Path(script_file).resolve()
    stack = contextlib.ExitStack()
    hooks = stack.enter_context(process_hooks(path.name))
    recipe, pair, workload, variant = catalog.identify(script_file)
    overrides = catalog.script_defaults(script_file)
    if path.is_relative_to(env.REPO_ROOT):
        hooks.prog = "python -m " + ".".join(path.relative_to(env.REPO_ROOT).with_suffix("").parts)
    parser = cli.script_parser(hooks.prog, doc or "", workload, overrides, pair)
    if extend is not None:
        extend(parser)
    args = parser.parse_args(argv)
    run = Run(recipe, workload, variant, args, overrides, hooks.prog, pair)  # input errors: one line, via the hook
    hooks.run, run._hooks = run, stack
    return run


def resolve_config(args, workload: str, mode: str, overrides: dict, pair: str) -> Config:
    """The run's settings: each size a flag gave, else the preset for the workload and mode ("smoke",
    "cuda" or "cpu") with the recipe's overrides for it (presets.defaults)."""
    preset = presets.defaults(workload, mode, overrides, pair)

    def pick(key):
        given = getattr(args, key, None)
        return given if given is not None else preset.get(key)

    return Config(batch_size=pick("batch_size"), steps=pick("steps"), warmup=pick("warmup"),
                  profile_steps=pick("profile_steps"), image_size=pick("image_size"), seed=args.seed,
                  data=args.data, min_time_s=pick("min_time") or 0.0, probe_steps=pick("probe_steps"))


@dataclass
class Measured:
    """What run.loop()'s stages returned, each filled in as its stage ends."""
    timing: Timing | None = None
    memory: Memory | None = None  # the peak over the timed steps
    batch_bytes: int | None = None  # a timed batch's tensors (serving: the request)
    evidence: Evidence | None = None
    flops: float | None = None


def _from_config(name: str) -> property:
    """A read-only Run attribute that scripts use (run.batch_size): the one copy is in run.config."""
    return property(lambda run: getattr(run.config, name), doc=f"run.config.{name}")


class Run:
    """One run of a script: its settings, its stages over the script's batches, its result."""

    _simulated_dropout = None  # a simulated GPU's dropout on a CPU (dropout.DtypeMasks), entered until close()
    _planted = None  # the tests' faults (faults.Planted), removed by close()

    batch_size, steps, warmup = _from_config("batch_size"), _from_config("steps"), _from_config("warmup")
    image_size, seed, data = _from_config("image_size"), _from_config("seed"), _from_config("data")

    def __init__(self, recipe, workload, variant, args, overrides, prog="harness", pair=None):
        self.recipe, self.workload, self.variant, self.prog = recipe, workload, variant, prog
        self.pair = pair or workload  # churn_serving: a second churn pair of the same recipe
        self.args, self.smoke = args, args.smoke
        self.device, self.notices = resolve_device(args.device)
        self.rank, self.world = env.rank_world()
        if self.world > 1:  # under torchrun: join the process group (common/distributed.py)
            from common import distributed

            self.device, joined = distributed.init(self.device)
            self.notices += joined
        self.profile = device_profile.profile(self.device)  # what the device can do: AMP's dtype, TF32...
        if self.profile.simulated and self.profile.kind == "cuda" and self.device.type != "cuda":
            self._simulated_dropout = dropout.DtypeMasks()  # CUDA's dropout draws its masks per dtype
            self._simulated_dropout.__enter__()
        self.config = resolve_config(args, workload, "smoke" if args.smoke else self.device.type, overrides, self.pair)
        name = f"{self.pair}_{variant}"
        self.out = Path(args.out or env.REPO_ROOT / "reports" / "results" / recipe / f"{name}.json")
        if self.rank:  # rank 0 writes the run's result, over every rank; the others their own beside it
            self.out = self.out.with_name(f"{self.out.stem}.rank{self.rank}.json")
        writable_dir(self.out.parent, "output folder")
        self.trace_dir = Path(args.trace_dir or env.REPO_ROOT / "reports" / "traces" / recipe / name)
        if self.config.profile_steps:
            writable_dir(self.trace_dir, "trace folder")
        ranges = Ranges(self.device)
        if ranges.kind == "off":
            self.notices.append("NVTX ranges off: no CUDA device")
        self._phases = stages.Phases(ranges, PhaseTimer(self.device) if args.phase_timing else None)
        self.stage = "setup"  # the stage under way: an out-of-memory result names it
        self.extra = {}  # anything a script adds to its result (a baseline's inference sweep, say)
        self.graph_flops = None  # set by common.graphs.capture: a recorded step's FLOPs, counted eagerly
        self._data_source = None
        self._setup_s = {}  # one-time work timed by run.setup(name) before the loop, seconds by name
        self._losses, self._probe_span, self._output_bytes = [], (0, 0), None
        self._feed, self._monitor, self._measured = None, None, Measured()
        self._randomness = None  # how the dropout masks were drawn, once the loop has run (Randomness)
        self._load = None  # other processes' CPU use on this run's cores during the timed steps (Load)
        self._hooks = None
        self._optimizers = trainstate.Stepped()  # what the learning probe saves and puts back
        self._skips = trainstate.ScalerSkips(lambda: len(self._losses))  # steps a GradScaler skipped
        self._planted = faults.plant(variant, self.pair, workload, lambda: self.stage)  # the tests' (COOKBOOK_FAULT)
        self.memory_cap_gb = None  # set when --memory-budget-gb capped the allocator (CUDA)
        self._t_start = time.perf_counter()
        if args.memory_snapshot and self.device.type != "cuda":
            self.notices.append("--memory-snapshot: the allocator's snapshot needs CUDA "
                                "(torch.cuda.memory._record_memory_history); none on this CPU run")
        if args.memory_budget_gb:
            self.memory_cap_gb, notice = memory.cap(self.device, args.memory_budget_gb)
            self.notices.append(notice)
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)  # seeds CUDA too: the same weights in slow and fast
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)  # data order and crops
        self.timeline = Timeline()
        self.timeline.mark("imports", IMPORTED_AT)
        self.timeline.mark("setup")  # the device (a CUDA context), seeds, the output folders
        # pipelined (launch.Pipeline): ready while the process before runs, device work once it is done
        self._gate = gate.from_env() if self.world == 1 else None
        if self._gate is not None:
            gate.prepare(self._gate, self.device)
            data.preload(workload, self.data)
            self.timeline.mark("ready")
            gate.wait(self._gate)
            self.timeline.mark("gate")

    @property
    def steps_run(self) -> int:
        """Batches the loop has handed out so far (warm-up and profiled included)."""
        return self._feed.count if self._feed is not None else 0

    @property
    def data_source(self) -> DataSource | None:
        return self._data_source

    def record_data_source(self, source: DataSource) -> None:
        """Where the data came from (workloads.datasource.source): common.data's loaders say it here,
        once the data is read (the timeline's "data")."""
        self._data_source = source
        self.timeline.mark("data")

    # --- used by the script -------------------------------------------------------------------
    @contextlib.contextmanager
    def setup(self, name: str):
        """One-time work a step needs before run.loop(), such as a hand-captured CUDA graph's warm-up
        and recording (common.graphs.capture wraps itself in it). Timed, kept in the result by name
        (result.compile.setup_s) and counted in the warm-up and first-step figures, where
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

    def phase(self, name: str):
        """An NVTX range (CUDA) and, while profiling, a profiler range named after the phase."""
        return self._phases.range(name)

    def log_loss(self, loss: torch.Tensor) -> None:
        """Keep the loss on the device (no sync); read once in finish() for the parity check."""
        self._losses.append(loss.detach())

    def log_output(self, output: torch.Tensor) -> None:
        """Serving scripts: the batch's mean output stands in for the loss in the parity check. Kept
        as a copy (a served answer may sit in a reused buffer) and reduced after the loop, so the
        step pays a small copy, not a reduction."""
        if self._output_bytes is None:
            self._output_bytes = output.nelement() * output.element_size()  # what goes back to the caller
        if self._planted is not None:
            output = self._planted.answer(output)
        self._losses.append(output.detach().clone())

    def loop(self, batches):
        """Yield warm-up, probe, timed, profiled and counted batches; each stage measures its own."""
        if os.environ.get(env.PLAIN_ENV):
            yield from self._plain(batches)
            return
        source = stream = iter(batches)
        if self._planted is not None:
            stream = self._planted.stream(stream)
        feed = self._feed = stages.Feed(stream, self._phases)
        cfg, phases, m, mark = self.config, self._phases, self._measured, self.timeline.mark
        mark("model")  # what the script built before its loop: the model, its optimizer, the batches
        # the checked, untimed stages draw every dropout mask as fp32 does, so that twins of other dtypes
        # drop the same units there (common.measure.dropout); not where torch.compile traces, whose guards
        # would hold the mode and recompile once it is gone, and whose Inductor draws its own masks anyway
        shared = None if dropout.compiled(sys.modules.get("__main__")) else dropout.SharedMasks()
        with shared or contextlib.nullcontext():
            self.stage = "warm-up"
            warm = yield from stages.warm_up(feed, self.device, cfg.warmup, phases.ranges,
                                             sum(self._setup_s.values()))
            if warm.first_at is not None:
                mark("first step", warm.first_at)  # compile's cold start ends here (common.analysis.coldstart)
            mark("warm-up")
            shared_steps = len(self._losses)
            self.stage = "learning probe"
            first = len(self._losses)
            if self._output_bytes is None:  # serving scripts learn nothing: no probe
                yield from stages.probed(feed, self.device, cfg.probe_steps, phases.ranges, self._optimizers)
            self._probe_span = (first, len(self._losses))
        self._randomness = Randomness(shared_steps=shared_steps if shared and shared.calls else 0,
                                      calls=shared.calls if shared else 0,
                                      dtypes=sorted(shared.dtypes) if shared else [],
                                      per_dtype=self.device.type == "cuda" or self._simulated_dropout is not None)
        if faults.role(self.variant)[0] != self.variant and self._randomness.calls:
            torch.manual_seed(self.seed + 1)  # an A/A's second role: its own dropout stream from here on
            self._randomness.reseeded_at = shared_steps
        mark("probe")
        self._monitor = GpuMonitor(self.device)
        if self._monitor.notice:
            self.notices.append(self._monitor.notice)
        n = stages.timed_steps(warm, cfg.steps, cfg.min_time_s)
        if self.world > 1:  # every rank runs the same steps, or one waits forever in an all-reduce
            from common import distributed

            n = distributed.agree_max(n)
        self.stage = "timed steps"
        with contention.Window() as busy:  # what else ran on these cores while the steps were timed
            # a loader's queue drained to its steady level first (not where ranks would each settle apart)
            m.timing, m.memory = yield from stages.timed(feed, self.device, n, cfg.batch_size, warm, phases,
                                                         self._monitor, source if self.world == 1 else None, mark)
        self._load = busy.load
        m.batch_bytes = stages.nbytes(feed.last)
        mark("timed")
        self.stage = "profiled steps"
        memory_dir = (Path(self.args.memory_dir) if self.args.memory_dir else
                      self.trace_dir if self.args.memory_snapshot and self.device.type == "cuda" else None)
        m.evidence = yield from stages.profiled(feed, self.device, cfg.profile_steps, self.trace_dir,
                                                f"{self.pair}_{self.variant}"
                                                + (f"_rank{self.rank}" if self.world > 1 else ""), memory_dir, phases,
                                                self._optimizers, mark, later=self.args.trace_later)
        self.stage = "flop count"
        m.flops = yield from stages.counted(feed, self.graph_flops)
        mark("flop count")
        stages.shut_down(source)

    def _plain(self, batches):
        """Under the doctor: batches unmeasured, as many as a training run would draw (the doctor stops
        the script once it has measured); then the script ends, since its code after the loop reads
        this run's measurements, which a plain run has none of."""
        source = iter(batches)
        yield from itertools.islice(source, PLAIN_STEPS)
        stages.shut_down(source)
        print(f"{self.prog}: the loop ended (plain run under the doctor)", flush=True)
        raise SystemExit(0)

    # --- results --------------------------------------------------------------------------------
    def _result(self, status: str) -> RunResult:
        return RunResult(recipe=self.recipe, workload=self.workload, pair=self.pair, variant=self.variant,
                         status=status, device=self.device.type, smoke=self.smoke, config=self.config,
                         env=stamp.take(self.device), data_source=self.data_source, notices=self.notices,
                         total_s=time.perf_counter() - self._t_start, started=self.timeline.started,
                         timeline=self.timeline.marks,
                         forked=timeline.FORKED or None)

    def write_oom(self, exc: BaseException) -> None:
        """Out of memory is a result: which batch size, at which stage, with the allocator's words."""
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        gate.release(self._gate, self.device)
        result = self._result("oom")
        result.oom = Oom(batch_size=self.batch_size, stage=self.stage, message=message[:300])
        write_result(self.out, result)
        print(f"{self.prog}: out of memory at batch {self.batch_size} ({self.stage}): {message[:200]}", file=sys.stderr)

    def finish_timing(self) -> Timing:
        """The timed steps' statistics, for a script that derives numbers from them before finish()."""
        if self._measured.timing is None:
            raise RuntimeError("run.finish_timing() before run.loop() ran to its end")
        return self._measured.timing

    def finish(self) -> RunResult:
        m = self._measured
        if m.timing is None:
            raise RuntimeError("run.finish() before run.loop() ran to its end")
        # a loss is a scalar; a served batch's answers are reduced to their mean here, after the timing
        losses = torch.stack([x.float().mean() for x in self._losses]).cpu().tolist() if self._losses else []
        a, b = self._probe_span  # step k of `losses` is the k-th step outside the probe, in both twins
        losses, probe_losses = losses[:a] + losses[b:], losses[a:b]
        skipped = self._skips.steps()  # indices into every logged loss, the probe's included
        serving = self._output_bytes is not None  # known only once it logged an answer
        if serving:  # no probe
            probe_losses = []
        gpu = self._monitor.report(gate.siblings(self._gate))  # started with the timed steps, which finished
        result = self._result("ok")
        result.timing, result.memory = m.timing, m.memory
        if isinstance(m.evidence, UnreadTrace):
            result.unread = m.evidence
        else:
            result.evidence = m.evidence
        result.flops_per_step, result.gpu_monitor, result.warnings = m.flops, gpu, gpu.warnings + (
            [m.timing.queue_drained] if m.timing.queue_drained else [])
        result.losses, result.extra, result.compile = losses, self.extra, stages.compile_stats()
        result.probe_losses = probe_losses
        result.randomness = self._randomness
        result.load = self._load
        if serving:  # each request's answer from the warm-up's end on, for parity
            result.answers = [x.float().flatten().cpu().tolist() for x in self._losses[b:b + ANSWERS_KEPT]]
        result.skipped_steps = [i if i < a else i - (b - a) for i in skipped if not a <= i < b]
        result.probe_skipped = sum(a <= i < b for i in skipped)
        if self._setup_s:  # a hand capture's one-time cost, beside what torch.compile did
            result.compile = result.compile or CompileStats()
            result.compile.setup_s = dict(self._setup_s)
        if serving:  # requests in, answers out
            result.bytes_per_step = (m.batch_bytes or 0) + self._output_bytes
        if "common.distributed" in sys.modules:  # a data-parallel script: every rank's view, on rank 0
            from common import distributed

            distributed.settle(result, self.device)
        gate.release(self._gate, self.device)  # its device work is done: the next process may start its own
        self.timeline.mark("result")  # what it wrote beside the measurements: losses, stamp, monitor
        write_result(self.out, result)
        print(summary(result, self.out))
        self.close()
        return result

    def close(self) -> None:
        """Restore the process hooks start() installed."""
        self._optimizers.close()
        self._skips.close()
        if self._planted is not None:
            self._planted.close()
        if self._simulated_dropout is not None:
            self._simulated_dropout.__exit__(None, None, None)
            self._simulated_dropout = None
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None
