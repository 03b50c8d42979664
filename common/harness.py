"""What a recipe script touches: `run = harness.start(__file__, __doc__)`, then `run.loop(...)`,
`run.phase(...)`, `run.log_loss(...)` and `run.finish()`. The Run holds the settings (run.config),
runs the stages in order and writes the result; the stages themselves live in common/measure/stages.py,
the result's assembly in common/measure/outcome.py, what tests plant from outside in common/measure/rig.py.

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
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common import catalog, cli, data, env, presets, startup
from common.analysis.results import write_result
from common.analysis.results_run import Config, DataSource, Randomness, RunResult, Timing
from common.errors import EXIT_OOM
from common.measure import contention, dropout, gate, memory, stages, trainstate
from common.measure import device as device_profile
from common.measure.answers import ServedAnswers
from common.measure.gpu_monitor import GpuMonitor
from common.measure.nvtx import Ranges
from common.measure.outcome import Measurements, finished_result, oom_result
from common.measure.process import is_oom, process_hooks, resolve_device, writable_dir
from common.measure.rig import rig_from_env
from common.measure.stages import MAX_STEPS, PHASES
from common.measure.terminal import summary
from common.measure.timeline import Timeline
from common.measure.timing import PhaseTimer, synchronize
from common.workload_specs import workload_spec

IMPORTED_AT = time.time()  # torch and the harness imported: the timeline's "imports"
startup.check_torch(Path(sys.argv[0]).stem or "harness")  # an old torch: one line now, not an error at the run's end

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
    stack.enter_context(rig_from_env(run))  # the tests' faults, a simulated GPU, an A/A's second role
    return run


def resolve_config(args, workload: str, mode: str, overrides: dict, pair: str) -> Config:
    """The run's settings: each size a flag gave, else the preset for the workload and mode ("smoke",
    "cuda" or "cpu") with the recipe's overrides for it (presets.defaults)."""
    values = presets.defaults(workload, mode, overrides, pair)
    values.update({k: v for k, v in vars(args).items() if k in values and v is not None})  # a flag over the preset
    spec = workload_spec(workload)
    own = {k: values[k] for k in spec.size_flags if k != "image_size"} or None  # the image's has a field of its own
    return Config(batch_size=values["batch_size"], steps=values["steps"], warmup=values["warmup"],
                  profile_steps=values["profile_steps"], image_size=values.get("image_size"), seed=args.seed,
                  data=args.data, min_time_s=values["min_time"] or 0.0, probe_steps=values["probe_steps"], sizes=own,
                  row_samples=values[spec.row_samples] if spec.row_samples else None,
                  sample=spec.sample if spec.sample != "sample" else None)


def _from_config(name: str) -> property:
    """A read-only Run attribute that scripts use (run.batch_size): the one copy is in run.config."""
    return property(lambda run: getattr(run.config, name), doc=f"run.config.{name}")


class Run:
    """One run of a script: its settings, its stages over the script's batches, its result."""

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
        self._data_source = None  # record_data_source
        self._feed, self._hooks = None, None  # set by loop() and start()
        self.answers = ServedAnswers()  # a serving script's (run.log_output)
        # seams for what the environment plants from outside (common.measure.rig): a user's run leaves them be
        self.batch_filter = lambda batches: batches  # between the script's batches and the stages
        self.after_shared = []  # each called with the Randomness once the stages that share masks end
        self.measured = Measurements()  # what the stages record, for the result; total_s counts from here
        self._optimizers = trainstate.Stepped()  # what the learning probe saves and puts back
        self._skips = trainstate.ScalerSkips(lambda: len(self.measured.losses))  # steps a GradScaler skipped
        self.memory_cap_gb = None  # set when --memory-budget-gb capped the allocator (CUDA)
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
        setup_s = self.measured.setup_s
        setup_s[name] = setup_s.get(name, 0.0) + time.perf_counter() - t0
        self.stage = stage

    def phase(self, name: str):
        """An NVTX range (CUDA) and, while profiling, a profiler range named after the phase."""
        return self._phases.range(name)

    def log_loss(self, loss: torch.Tensor) -> None:
        """Keep the loss on the device (no sync); read once in finish() for the parity check."""
        self.measured.losses.append(loss.detach())

    def log_output(self, output: torch.Tensor) -> None:
        """Serving scripts: the batch's answers stand in for the loss in the parity check (ServedAnswers)."""
        self.measured.losses.append(self.answers.kept(output))

    def loop(self, batches):
        """Yield warm-up, probe, timed, profiled and counted batches; each stage measures its own."""
        if os.environ.get(env.PLAIN_ENV):  # under the doctor, which measures the script from outside
            yield from stages.plain_run(batches, self.prog)
            return
        source = iter(batches)
        feed = self._feed = stages.Feed(self.batch_filter(source), self._phases)
        cfg, phases, m, mark = self.config, self._phases, self.measured, self.timeline.mark
        mark("model")  # what the script built before its loop: the model, its optimizer, the batches
        # the checked, untimed stages draw every dropout mask as fp32 does, so that twins of other dtypes
        # drop the same units there (common.measure.dropout); not where torch.compile traces, whose guards
        # would hold the mode and recompile once it is gone, and whose Inductor draws its own masks anyway
        shared = None if dropout.compiled(sys.modules.get("__main__")) else dropout.SharedMasks()
        with shared or contextlib.nullcontext():
            self.stage = "warm-up"
            warm = yield from stages.warm_up(feed, self.device, cfg.warmup, phases.ranges,
                                             sum(m.setup_s.values()))
            if warm.first_at is not None:
                mark("first step", warm.first_at)  # compile's cold start ends here (common.analysis.coldstart)
            mark("warm-up")
            shared_steps = len(m.losses)
            self.stage = "learning probe"
            first = len(m.losses)
            if not self.answers.serving:  # serving scripts learn nothing: no probe
                yield from stages.probed(feed, self.device, cfg.probe_steps, phases.ranges, self._optimizers)
            m.probe_span = (first, len(m.losses))
        drawn = shared or dropout.SharedMasks()  # none entered (torch.compile): no mask drawn, none shared
        m.randomness = Randomness(shared_steps=shared_steps if drawn.calls else 0, calls=drawn.calls,
                                  dtypes=sorted(drawn.dtypes), per_dtype=self.device.type == "cuda")
        for hook in self.after_shared:
            hook(m.randomness)
        mark("probe")
        m.monitor = GpuMonitor(self.device)
        if m.monitor.notice:
            self.notices.append(m.monitor.notice)
        n = stages.timed_steps(warm, cfg.steps, cfg.min_time_s)
        if self.world > 1:  # every rank runs the same steps, or one waits forever in an all-reduce
            from common import distributed

            n = distributed.agree_max(n)
        self.stage = "timed steps"
        with contention.Window() as busy:  # what else ran on these cores while the steps were timed
            # a loader's queue drained to its steady level first (not where ranks would each settle apart)
            m.timing, m.memory = yield from stages.timed(feed, self.device, n, cfg.samples_per_step, warm, phases,
                                                         m.monitor, source if self.world == 1 else None, mark)
        m.load = busy.load
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

    # --- results --------------------------------------------------------------------------------
    def write_oom(self, exc: BaseException) -> None:
        """Out of memory is a result: which batch size, at which stage, with the allocator's words."""
        gate.release(self._gate, self.device)
        result = oom_result(self, exc)
        write_result(self.out, result)
        print(f"{self.prog}: out of memory at batch {self.batch_size} ({self.stage}): {result.oom.message[:200]}",
              file=sys.stderr)

    def finish_timing(self) -> Timing:
        """The timed steps' statistics, for a script that derives numbers from them before finish()."""
        if self.measured.timing is None:
            raise RuntimeError("run.finish_timing() before run.loop() ran to its end")
        return self.measured.timing

    def finish(self) -> RunResult:
        """Write the result (common.measure.outcome) and print its summary; then close()."""
        if self.measured.timing is None:
            raise RuntimeError("run.finish() before run.loop() ran to its end")
        result = finished_result(self, self._skips, self._gate)
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
        """Restore what start() installed: the process hooks, and what the environment planted (rig_from_env)."""
        self._optimizers.close()
        self._skips.close()
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None
