"""What a recipe script touches: `run = harness.start(__file__, __doc__)`, then `run.loop(...)`,
`run.phase(...)`, `run.log_loss(...)` and `run.finish()`. All measuring lives here.

A run has four consecutive stretches over one stream of batches:
  warm-up  (untimed; its wall time, compile time included, is reported on its own line)
  timed    (per-step CUDA events or perf_counter, read once after the loop; no profiler)
  profiled (torch.profiler, 1 warm-up + N active steps -> trace + evidence; never timed)
  counted  (one step under FlopCounterMode: the FLOPs a step really executes, recomputation included)
"""
import contextlib
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from common import cli, cpu_time, env, memory, presets, recipes, stats
from common.errors import CookbookError
from common.gpu_monitor import GpuMonitor
from common.nvtx_ranges import Ranges
from common.profiling import memory_artifacts, op_views, profiler, trace_evidence
from common.results import write_result
from common.timing import PhaseTimer, StepTimer, synchronize

PHASES = ("data", "copy", "forward", "backward", "optimizer")  # "copy": host-to-device, where a script has one
EXIT_OOM = 3  # the runner reads this as "out of memory": a result, not a crash
# Testing aid: COOKBOOK_FAULT="oom:fast" (or "crash:slow:churn") raises at the first timed step of
# the matching variant (and workload), so the runner's fault handling can be tested on a CPU.
FAULT_ENV = "COOKBOOK_FAULT"
_prog = Path(sys.argv[0]).name  # replaced by "python -m recipes.<recipe>.<script>" in start()
_current = None  # the Run of this process, for the exception hook


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _uncaught(exc_type, exc, tb):
    """Input problems are one line, not a stack trace; running out of memory is a result; anything
    else keeps its trace (the runner shows its last lines)."""
    if issubclass(exc_type, CookbookError):
        print(f"{_prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if issubclass(exc_type, KeyboardInterrupt):
        print(f"{_prog}: interrupted: no result written", file=sys.stderr)
        sys.exit(130)
    if is_oom(exc) and _current is not None:
        _current.write_oom(exc)
        sys.exit(EXIT_OOM)
    sys.__excepthook__(exc_type, exc, tb)


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill ends like Ctrl-C: nothing half-written


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
    """extend(parser) may add a script's own flags (the ladder's --rung); they land in run.args."""
    global _prog, _current
    sys.excepthook = _uncaught
    signal.signal(signal.SIGTERM, _terminate)
    recipe, workload, variant = recipes.identify(script_file)
    overrides = getattr(recipes.script_settings(script_file), "DEFAULTS", {})
    path = Path(script_file).resolve()
    inside = path.is_relative_to(env.REPO_ROOT)
    _prog = "python -m " + ".".join(path.relative_to(env.REPO_ROOT).with_suffix("").parts) if inside else path.name
    parser = cli.script_parser(_prog, doc or "", workload, overrides)
    if extend is not None:
        extend(parser)
    args = parser.parse_args(argv)
    _current = Run(recipe, workload, variant, args, overrides)  # input errors: one line, via _uncaught
    return _current


class Run:
    def __init__(self, recipe, workload, variant, args, overrides):
        self.recipe, self.workload, self.variant = recipe, workload, variant
        self.args = args
        self.device, self.notices = resolve_device(args.device)
        self.smoke = args.smoke
        mode = "smoke" if args.smoke else self.device.type
        sizes = presets.defaults(workload, mode, overrides)
        pick = lambda key: getattr(args, key, None) if getattr(args, key, None) is not None else sizes.get(key)  # noqa: E731
        self.batch_size, self.steps, self.warmup = pick("batch_size"), pick("steps"), pick("warmup")
        self.profile_steps, self.image_size = pick("profile_steps"), pick("image_size")
        self.seed, self.data = args.seed, args.data
        self.memory_dir = Path(args.memory_dir) if args.memory_dir else None
        name = f"{workload}_{variant}"
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
        self.extra = {}  # anything a script adds to its result (a baseline's inference sweep, say)
        self.steps_run = 0  # batches the loop has handed out so far (warm-up and profiled included)
        self._timing = None
        self._evidence = None
        self._flops = None
        self._memory = None
        self._t_start = time.perf_counter()
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)  # seeds CUDA too: the same weights in slow and fast
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)  # data order and crops

    # --- used by the script -------------------------------------------------------------------
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
        """Serving scripts: the batch's mean output stands in for the loss in the parity check."""
        self._losses.append(output.detach().float().mean())

    def loop(self, batches):
        """Yield warmup + steps + profiled batches, timing and profiling around the script's body."""
        it = iter(batches)
        waits = []  # host seconds spent in next(it) per timed step: the wait for data

        def next_batch(record=False):
            self.steps_run += 1
            with self.phase("data"):
                if not record:
                    return next(it)
                t = time.perf_counter()
                batch = next(it)
                waits.append(time.perf_counter() - t)
                return batch

        self.stage = "warm-up"
        t0 = time.perf_counter()
        first_step_s = None
        for i in range(self.warmup):
            with self._ranges.range(f"warmup {i}"):
                yield next_batch()
            if i == 0:
                synchronize(self.device)  # untimed: the first step alone holds compilation and autotuning
                first_step_s = time.perf_counter() - t0
        synchronize(self.device)  # note: a sync point, between warm-up and timing only
        warmup_s = time.perf_counter() - t0

        memory.reset_peak(self.device)
        timer = StepTimer(self.device, self.steps)
        self.stage = "timed steps"
        self._monitor = GpuMonitor(self.device)
        if self._monitor.notice:
            self.notices.append(self._monitor.notice)
        cpu0, workers0 = time.process_time(), cpu_time.children_s()
        t0 = time.perf_counter()
        with self._monitor:
            for i in range(self.steps):
                timer.start(i)
                if i == 0:
                    self._injected_fault()
                self._timed_step = i
                with self._ranges.range(f"step {i}"):
                    yield next_batch(record=True)
                timer.stop(i)
            self._timed_step = None
            step_ms = timer.step_ms()  # the one sync of the timed stretch, after its last step
        wall_s = time.perf_counter() - t0
        cpu_s, workers1 = time.process_time() - cpu0, cpu_time.children_s()
        self._memory = memory.peak(self.device)
        if self._phase_timer is not None and self._phase_timer.peaks:
            # the phase timer resets the allocator's peak at every phase: the run's peak is theirs
            self._memory["max_allocated_mb"] = max(self._memory["max_allocated_mb"], *self._phase_timer.peaks.values())
        self._timing = {"warmup_steps": self.warmup, "warmup_s": warmup_s, "first_step_s": first_step_s,
                        "timed_wall_s": wall_s, "step_ms": step_ms,
                        "data_wait_share": sum(waits) / wall_s if wall_s > 0 else None,
                        "data_wait_ms_median": sorted(waits)[len(waits) // 2] * 1000 if waits else None,
                        "cpu_ms_per_step": cpu_s * 1000 / self.steps,
                        "worker_cpu_ms_per_step": (workers1 - workers0) * 1000 / self.steps
                        if workers0 is not None and workers1 is not None else None,
                        **stats.summarize(step_ms, self.batch_size)}
        if self._phase_timer is not None:
            per_phase = self._phase_timer.phase_ms()
            self._timing["phase_ms"] = {p: stats.summarize(ms, self.batch_size) for p, ms in per_phase.items()}
            self._timing["phase_peak_mb"] = self._phase_timer.peaks or None  # CUDA only

        self.stage = "profiled steps"
        if self.profile_steps:
            exclude = set(PHASES) | {f"step {i}" for i in range(self.profile_steps + 1)}
            worker = f"{self.workload}_{self.variant}"
            snapshot = self.memory_dir is not None and self.device.type == "cuda"
            if snapshot:
                torch.cuda.memory._record_memory_history(max_entries=100_000)  # allocations with stacks
            with profiler(self.trace_dir, worker, self.device, self.profile_steps,
                          with_stack=self.memory_dir is not None) as prof:
                self._profiling = True
                for i in range(self.profile_steps + 1):  # +1: the profiler's own warm-up step
                    yield next_batch()
                    prof.step()
                self._profiling = False
            self._evidence = {"trace": str(prof.trace_path),
                              **trace_evidence(prof.trace_path, self.device, PHASES),
                              "views": op_views(prof, self.device, self.profile_steps, exclude)}
            if self.memory_dir is not None:
                self._evidence["memory"] = memory_artifacts(prof, self.memory_dir, worker, self.device, snapshot)

        self.stage = "flop count"
        counter = FlopCounterMode(display=False)
        with counter:
            yield next_batch()
        # a replayed CUDA graph runs no aten ops for the counter to see: no count, rather than 0
        self._flops = counter.get_total_flops() or None

    def _injected_fault(self):
        spec = os.environ.get(FAULT_ENV, "")
        kind, _, target = spec.partition(":")
        variant, _, workload = target.partition(":")
        if not spec or variant != self.variant or workload not in ("", self.workload):
            return
        if kind == "oom":
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected by {FAULT_ENV})")
        raise RuntimeError(f"injected crash ({FAULT_ENV}={spec})")

    def _result(self, status: str) -> dict:
        return {
            "recipe": self.recipe, "workload": self.workload, "variant": self.variant, "status": status,
            "device": self.device.type, "smoke": self.smoke,
            "config": {"batch_size": self.batch_size, "steps": self.steps, "warmup": self.warmup,
                       "profile_steps": self.profile_steps, "image_size": self.image_size,
                       "seed": self.seed, "data": self.data},
            "env": env.stamp(self.device),
            "data_source": self.data_source,
            "notices": self.notices,
            "total_s": time.perf_counter() - self._t_start,
        }

    def write_oom(self, exc: BaseException) -> None:
        """Out of memory is a result: which batch size, at which stage, with the allocator's words."""
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        result = {**self._result("oom"), "oom": {"batch_size": self.batch_size, "stage": self.stage,
                                                  "message": message[:300]}}
        write_result(self.out, result)
        print(f"{_prog}: out of memory at batch {self.batch_size} ({self.stage}): {message[:200]}", file=sys.stderr)

    def finish_timing(self) -> dict:
        """The timed steps' statistics, for a script that derives numbers from them before finish()."""
        if self._timing is None:
            raise RuntimeError("run.finish_timing() before run.loop() ran to its end")
        return self._timing

    def finish(self) -> dict:
        if self._timing is None:
            raise RuntimeError("run.finish() before run.loop() ran to its end")
        losses = torch.stack(self._losses).float().cpu().tolist() if self._losses else []
        gpu = self._monitor.summary() if self._monitor else {"available": False, "warnings": []}
        result = {
            **self._result("ok"),
            "timing": self._timing,
            "memory": self._memory,
            "evidence": self._evidence,
            "flops_per_step": self._flops,
            "gpu_monitor": gpu,
            "warnings": gpu["warnings"],
            "losses": losses,
            "extra": self.extra,
        }
        write_result(self.out, result)
        print(summary(result, self.out))
        return result


def summary(r: dict, out: Path) -> str:
    t, m, ev, cfg = r["timing"], r["memory"], r["evidence"] or {}, r["config"]
    src = r["data_source"] or {}
    size = f", image {cfg['image_size']}px" if cfg.get("image_size") else ""
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
    mem = (f"{m['max_allocated_mb']:.0f} MB allocated ({m['max_reserved_mb']:.0f} MB reserved)"
           if "max_allocated_mb" in m else f"{m['peak_rss_mb']:.0f} MB peak RSS (CPU, whole process)")
    lines = [
        f"{r['recipe']}/{r['workload']} {r['variant']} on {env.describe_device(r['env'])}",
        f"  data       {src.get('kind', '?')}{' - ' + src['note'] if src.get('note') else ''}",
        f"  setup      batch {cfg['batch_size']}{size}, {t['n']} timed steps after {t['warmup_steps']} warm-up "
        f"steps ({t['warmup_s']:.2f} s; the first step alone {fmt(t.get('first_step_s'), '.2f')} s, compile included)",
        f"  step time  median {t['median_ms']:.3f} ms  p95 {t['p95_ms']:.3f}  p99 {t['p99_ms']:.3f}  "
        f"cv {t['cv']:.1%}{'  NOISY' if stats.is_noisy(t) else ''}",
        f"  throughput {t['throughput_per_s']:.1f} samples/s",
        f"  host       waiting for data {fmt(t.get('data_wait_share'), '.1%')} of the timed wall time; CPU "
        f"{fmt(t.get('cpu_ms_per_step'), '.2f')} ms/step in this process, {fmt(t.get('worker_cpu_ms_per_step'), '.2f')} "
        "in its workers",
        f"  memory     {mem}",
    ]
    if r.get("flops_per_step") is not None:
        lines.append(f"  compute    {r['flops_per_step'] / 1e9:.3f} GFLOP per step (FlopCounterMode)")
    if ev:
        lines.append(f"  evidence   syncs/step {ev['syncs_per_step']:.1f}  kernels/step {fmt(ev['kernels_per_step'], '.0f')}"
                     f"  ops/step {ev['ops_per_step']:.0f}  GPU idle {fmt(ev['gpu_idle_share'], '.0%')}")
        lines.append(f"  trace      {ev['trace']}")
    lines += [f"  result     {out}"] + [f"  notice     {n}" for n in r["notices"]]
    lines += [f"  WARNING    {w}" for w in r["warnings"]]
    return "\n".join(lines)
