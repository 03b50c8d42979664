"""The doctor's child: a user's training script run unmodified, measured from outside.

    python -m common.measure.observer --out OBS.json [--step auto|optimizer|backward|forward|batch]
        [--warmup N] [--steps N] [--time S] [--profile-steps N] [--trace-dir DIR] -- path/to/train.py its args

The script runs as `python train.py` would run it (its own argv, its folder first on sys.path, the
caller's working directory), with hooks that need no change to its code:
- a step ends at each `optimizer.step()` (PyTorch's global optimizer step hooks, any torch.optim
  optimizer), else, where the script built none (fastai's and Keras's own optimizers, a hand-written
  update), at each top-level `loss.backward()`; or at each call of the top-level model (`--step
  forward`, inference), or at each batch drawn from a DataLoader (`--step batch`);
- phases: `data` (inside a DataLoader iterator's `next`), `forward` (a top-level module's call),
  `backward` (`torch.autograd.backward`, which `loss.backward()` calls), `optimizer` (its step);
then the harness's stages, driven by those step ends instead of a loop: warm-up steps, timed steps
(CUDA events or perf_counter, phase times, peak memory, NVML), profiled steps (the same profiler,
trace reading and HTA as a recipe run), one FLOP-counted step. Then the script is stopped: the user
does not wait for a whole training run. A harness script (baselines/) runs as a plain one
(env.PLAIN_ENV), so its own measurement stays out of the way.

Python's, NumPy's and torch's random generators are seeded (0) before the script starts, and the
loss of every backward (or, with --step forward, the mean of every model output) is kept, so that
two runs of one script can be compared step by step. `--fix NAME` applies one of the doctor's fixes
from outside (common.measure.fixes; `make doctor FLAGS='--try'`).
"""
import argparse
import contextlib
import math
import os
import random
import re
import runpy
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter
from torch.utils.flop_counter import FlopCounterMode

from common import env
from common.analysis import stats
from common.analysis.results import write_result
from common.analysis.results_doctor import Observation
from common.analysis.results_run import Config, Evidence, OutOfMemory, RunResult, Timing, oom_path
from common.cli import DOCTOR_MIN_TIMED as MIN_TIMED
from common.cli import OneLineParser, add_doctor_flags, split_passthrough
from common.errors import EXIT_COOKBOOK_FAULT, EXIT_OOM
from common.measure import contention, cpu_time, memory, settings, stamp
from common.measure.fixes import Fixes
from common.measure.gpu_monitor import GpuMonitor
from common.measure.nvtx import Ranges
from common.measure.process import interrupt_on_sigterm, is_oom, oom_device
from common.measure.profiling import mark_rank, profiler
from common.measure.settings import CLOSURE
from common.measure.stages import (
    Phases,
    Settling,
    compile_stats,
    drained,
    eager_compiled,
    figure,
    pace,
    read_evidence,
    ready,
    shut_down,
    whole,
)
from common.measure.syncs import SyncLines
from common.measure.timing import PhaseTimer, StepTimer, data_shares, synchronize

SLOWER = 1.25  # timed steps whose pace passes the warm-up's by this are said to have slowed

# torch.utils.data.DataLoader's warning when it is asked for more workers than the cores it sees
TOO_MANY_WORKERS = re.compile(r"create (?P<made>\d+) worker processes in total\. Our suggested max number of "
                              r"worker in current system is (?P<most>\d+)")
NO_STEP_AFTER = 200  # model calls or batches with no optimizer.step(): the script needs --step


class CookbookFault(BaseException):
    """The doctor's own code failed while the user's script was running: reported as the cookbook's
    error with its traceback, never as "the script raised". A BaseException, as Measured is, so that
    a script's `except Exception:` cannot swallow it and go on with the doctor broken."""


# errors of the script's own device work, which CUDA reports at the next sync, wherever that is
DEVICE_ERRORS = ("CUDA error", "out of memory", "device-side assert")


@contextlib.contextmanager
def doctor_work(what: str):
    """Around the doctor's own work inside the script's run: its errors become CookbookFault."""
    try:
        yield
    except Exception as e:
        if isinstance(e, torch.cuda.OutOfMemoryError) or any(word in str(e) for word in DEVICE_ERRORS):
            raise
        raise CookbookFault(f"{what}: {type(e).__name__}: {e}") from e


class Measured(BaseException):
    """Raised in the script once the doctor has measured enough: it ends the script (a BaseException,
    so that the script's own `except Exception` does not swallow it)."""


class Observer:
    """The hooks and the stages they drive, one step end at a time."""

    def __init__(self, args):
        self.args = args
        self.step_kind = args.step  # "auto": "optimizer" at a torch.optim step, "backward" at a backward before any
        self.built = 0  # torch.optim optimizers the script built
        self.ends = 0  # step ends seen
        self.stage = "warm-up"
        self.optimizers, self.loaders, self.top_modules = {}, {}, {}
        self.optimizer_objects = {}  # id -> the optimizer itself (the roofline counts its parameters)
        self.first_optimizer = None
        self.calls = self.batches = 0  # top-level model calls and batches drawn, whatever the step is
        self.depth = 0
        self.in_data = False  # inside a DataLoader's iter() or next()
        self.busy = 0  # inside backward or an optimizer step: a forward there (a checkpoint's recomputation,
        # an LBFGS closure) and a nested backward belong to that phase, not to their own
        self.pid = os.getpid()  # DataLoader workers fork with these hooks: theirs do nothing
        self.batch_open = False  # --step batch: a batch was handed out and its step is under way
        self.timed_batches = 0  # batches drawn during the timed steps (gradient accumulation draws several)
        self.stepped = {}  # optimizer name -> steps during the timed steps
        self.flags = {}  # optimizer name -> its foreach and fused settings, as built
        self.zero_grad = None  # "set_to_none" or "zeroes", from the zero_grad calls
        self._last_end = None  # perf_counter at the last step end
        self.device = None
        self.batch_size = None
        self.phases = None  # Phases, from the timed steps on
        self._open = {}  # phase -> its open context (entered in one hook, left in another)
        self._warm = []  # perf_counter at each warm-up step end
        self._began = None  # perf_counter at the first batch or model call: the first step's start
        self._handles, self._patched = [], []
        self.timed_n = 0
        self.timed_from = self.profiled_from = None  # the step end each stage began at
        self.result = None
        self.notices = []
        self.prof = self.counter = None
        self.watched = []  # the DataLoader iterators, to shut their workers down at the end
        self.fixes = Fixes(args.fix)
        self.losses = []  # each backward's loss (--step forward: each output's mean), on its device
        self.t_start = time.perf_counter()
        self._syncs = None  # SyncLines, over the timed and profiled steps (made once the device is known)
        self._feeding = None  # the DataLoader iterator of the last batch, whose queue settles before the timing
        self._queued = None  # its ready batches as the timed steps began
        self.cwd = os.getcwd()  # where the script started (a script may chdir later: Hydra does)

    # --- installing -----------------------------------------------------------------------------
    def install(self):
        self.fixes.install()
        self._warned = warnings.showwarning
        warnings.showwarning = self._warning
        self._handles += [register_optimizer_step_pre_hook(self._optimizer_pre),
                          register_optimizer_step_post_hook(self._optimizer_post),
                          torch.nn.modules.module.register_module_forward_pre_hook(self._forward_pre),
                          torch.nn.modules.module.register_module_forward_hook(self._forward_post,
                                                                               with_kwargs=True)]
        # Global module hooks, for the whole run: a hook per module call costs about a microsecond of
        # Python, but swapping them for hooks on the top-level modules after warm-up would change what
        # torch.compile guards on and recompile the script's model inside the timed steps. They fire
        # once more for a compiled module's wrapper, which the depth count absorbs.
        warnings.filterwarnings("ignore", message="Using `torch.compile\\(module\\)` when there are global hooks")
        observer = self
        real_iter, real_backward = DataLoader.__iter__, torch.autograd.backward

        real_opt_zero, real_module_zero = torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad
        real_opt_init = torch.optim.Optimizer.__init__

        def watched_iter(loader):  # starting an epoch (workers spawn, persistent ones reset) is data time too
            return Watched(observer.fetch(lambda: real_iter(loader)), loader, observer)

        # a loader that is no torch DataLoader but hands out batches through torch's iterators (fastai's):
        # its batches are drawn where the iterator's next is, outside a Watched
        real_it_init, real_it_next = _BaseDataLoaderIter.__init__, _BaseDataLoaderIter.__next__

        def it_init(iterator, loader, *a, **k):
            iterator._cookbook_loader = loader
            return real_it_init(iterator, loader, *a, **k)

        def it_next(iterator):
            if observer.in_data or observer.pid != os.getpid():  # a Watched's, or a worker's own
                return real_it_next(iterator)
            return observer.draw(lambda: real_it_next(iterator), iterator._cookbook_loader, iterator)

        def backward(*a, **k):
            if observer.busy or observer.pid != os.getpid():
                return real_backward(*a, **k)
            observer.keep(a[0] if a else k.get("tensors"))
            a, k = observer.fixes.before_backward(a, k)  # fp16's loss scale, where the amp fix runs in fp16
            observer.busy += 1
            try:
                with observer.phase("backward"):
                    done = real_backward(*a, **k)
            finally:
                observer.busy -= 1
            observer.after_backward()
            return done

        def built(optimizer, *a, **k):
            done = real_opt_init(optimizer, *a, **k)
            if observer.pid == os.getpid():
                observer.built += 1
                observer.fixes.built(optimizer)
            return done

        def opt_zero_grad(optimizer, set_to_none=True):
            observer.zero_grad = "set_to_none" if set_to_none else "zeroes"  # as the script asks
            return real_opt_zero(optimizer, observer.fixes.zero_grad_arg(set_to_none))

        def module_zero_grad(module, set_to_none=True):
            observer.zero_grad = "set_to_none" if set_to_none else "zeroes"
            return real_module_zero(module, observer.fixes.zero_grad_arg(set_to_none))

        DataLoader.__iter__, torch.autograd.backward = watched_iter, backward
        torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad = opt_zero_grad, module_zero_grad
        torch.optim.Optimizer.__init__ = built
        _BaseDataLoaderIter.__init__, _BaseDataLoaderIter.__next__ = it_init, it_next
        self._patched = [(DataLoader, "__iter__", real_iter), (torch.autograd, "backward", real_backward),
                         (torch.optim.Optimizer, "__init__", real_opt_init),
                         (_BaseDataLoaderIter, "__init__", real_it_init),
                         (_BaseDataLoaderIter, "__next__", real_it_next),
                         (torch.optim.Optimizer, "zero_grad", real_opt_zero),
                         (torch.nn.Module, "zero_grad", real_module_zero)]

    def _warning(self, message, category, filename, lineno, file=None, line=None):
        """torch's warnings that bear on a measurement become notices too (still shown as usual)."""
        found = TOO_MANY_WORKERS.search(str(message))
        if found:
            self.notices.append(f"the script's DataLoader starts {found['made']} worker processes, more than the "
                                f"{found['most']} torch suggests for this machine's cores (its warning): the "
                                "workers then compete for the cores and loading slows down or freezes")
        return self._warned(message, category, filename, lineno, file, line)

    def uninstall(self):
        warnings.showwarning = getattr(self, "_warned", warnings.showwarning)
        self.fixes.uninstall()
        for h in self._handles:
            h.remove()
        self._handles = []
        for owner, name, real in self._patched:
            setattr(owner, name, real)
        self._patched = []

    # --- phases ---------------------------------------------------------------------------------
    def phase(self, name):
        return self.phases.range(name) if self.phases is not None else contextlib.nullcontext()

    def _enter(self, name):
        if self.phases is not None and name not in self._open:
            cm = self.phases.range(name)
            cm.__enter__()
            self._open[name] = cm

    def _leave(self, name):
        cm = self._open.pop(name, None)
        if cm is not None:
            cm.__exit__(None, None, None)

    # --- the hooks ------------------------------------------------------------------------------
    def _ours(self) -> bool:
        """Whether a module hook's call is one to count: not inside a graph being traced, not in the
        loader (torchvision's transforms are modules: their time is data), not inside backward or
        an optimizer step, not in a forked DataLoader worker."""
        return not (torch.compiler.is_compiling() or self.in_data or self.busy or self.pid != os.getpid())

    def _forward_pre(self, module, inputs):
        if not self._ours():
            return None
        changed = None
        if self.depth == 0:
            self.calls += 1
            self._began = self._began or time.perf_counter()
            self.top_modules.setdefault(id(module), type(module).__name__)
            if self.batch_size is None:  # a DataLoader's batch, drawn before, says it first
                self.batch_size = settings.batch_size_of(inputs)
            self._enter("forward")
            changed = self.fixes.before_model(module, inputs)
        self.depth += 1
        return changed

    def _forward_post(self, module, inputs, kwargs, output):
        if not self._ours():
            return None
        self.depth = max(0, self.depth - 1)
        changed = None
        if self.depth == 0:
            if self.batch_size is None:  # a model called with keyword arguments only: model(**batch)
                self.batch_size = settings.batch_size_of(kwargs)
            changed = self.fixes.after_model(module, output)
            self._leave("forward")
            if self.step_kind == "forward" and self.top_modules and id(module) == next(iter(self.top_modules)):
                self.keep(output)
                self.step_end()
            self._check_step_named()
        return changed

    def keep(self, value) -> None:
        """A loss (or an output) for the step-by-step comparison of two runs: kept on its device, one
        small reduction or copy, read once the script has stopped. A copy, since the tensor may be a
        buffer the next step overwrites (a CUDA graph's output under torch.compile's reduce-overhead);
        the mean is a new tensor already."""
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            self.losses.append(value.detach().clone() if value.numel() == 1 else value.detach().float().mean())

    def _optimizer_pre(self, optimizer, args, kwargs):
        if self.pid != os.getpid() or self.busy:
            return
        self.fixes.before_step(optimizer, closure=callable(args[1] if len(args) > 1 else kwargs.get("closure")))
        self.optimizer_objects.setdefault(id(optimizer), optimizer)
        name = self.optimizers.setdefault(id(optimizer), f"{type(optimizer).__name__}" + (
            f" #{len(self.optimizers) + 1}" if self.optimizers else ""))
        self.flags.setdefault(name, {k: optimizer.defaults.get(k) for k in ("foreach", "fused")})
        self._enter("optimizer")
        self.busy += 1
        return self._closure_outside(args, kwargs)

    def _closure_outside(self, args, kwargs):
        """A step given a closure (Lightning's automatic optimization, LBFGS) runs the forward and
        backward inside it: they are the step's forward and backward, not optimizer time. The
        closure is wrapped so that, while it runs, the optimizer phase is left and the hooks count
        (its loss kept, a fix's autocast applied); the new (args, kwargs) go to the step."""
        in_args = len(args) > 1 and callable(args[1])  # args[0] is the optimizer itself (profile_hook_step)
        closure = args[1] if in_args else kwargs.get("closure")
        if not callable(closure):
            return None

        def outside(*a, **k):
            self.busy -= 1
            self._leave("optimizer")
            with torch.profiler.record_function(CLOSURE) if self.phases and self.phases.profiling \
                    else contextlib.nullcontext():
                result = closure(*a, **k)  # if it raises, the step does too and its post-hook never runs:
            self._enter("optimizer")  # so the step is re-entered on a normal return only
            self.busy += 1
            self.fixes.after_closure(args[0])  # its gradients exist now: the loss scale's check
            return result

        return ((args[0], outside, *args[2:]), kwargs) if in_args else (args, {**kwargs, "closure": outside})

    def _optimizer_post(self, optimizer, args, kwargs):
        if self.pid != os.getpid() or id(optimizer) not in self.optimizers or not self.busy:
            return
        self.busy -= 1
        self._leave("optimizer")
        self.fixes.after_step(optimizer)
        if self.stage == "timed steps":
            name = self.optimizers[id(optimizer)]
            self.stepped[name] = self.stepped.get(name, 0) + 1
        if self.first_optimizer is None:
            self.first_optimizer = optimizer
        if self.step_kind == "auto":
            self.step_kind = "optimizer"
        if self.step_kind == "optimizer" and optimizer is self.first_optimizer:
            self.step_end()

    def after_backward(self):
        """A top-level backward ended: a step's end where the script built no torch.optim optimizer (its
        framework's own optimizer updates the weights: fastai, Keras 3 on torch), or --step backward."""
        if self.step_kind == "auto" and not self.built:
            self.step_kind = "backward"
        if self.step_kind == "backward":
            self.step_end()

    def fetch(self, get):
        """get() inside the data phase: its host time counted in the timed step under way."""
        timed = self.stage == "timed steps" and self.phases is not None and self.phases.step is not None
        t0 = time.perf_counter()
        self.in_data = True
        try:
            with self.phase("data"):
                return get()
        finally:
            self.in_data = False
            if timed:
                self.data_host[self.phases.step] += time.perf_counter() - t0

    def draw(self, get, loader, iterator):
        """A batch drawn from a loader: get() timed as the data phase, the batch counted."""
        if self.step_kind == "batch" and self.batch_open:  # the step of the batch handed out before ends here
            self.batch_open = False  # (an epoch's end, StopIteration, opens no step)
            self.step_end()
        t0 = time.perf_counter()
        batch = self.fetch(get)
        self.batch_open = True
        self.on_batch(loader, batch, t0, iterator)
        return batch

    def on_batch(self, loader, batch, t0, iterator=None):
        self.batches += 1
        if self.stage == "timed steps":
            self.timed_batches += 1
        self._began = self._began or t0
        self._feeding = iterator  # the iterator that hands out the steps' batches (not a validation loader's)
        if id(loader) not in self.loaders:
            self.loaders[id(loader)] = settings.loader_settings(loader, batch, iterator)
        if self.batch_size is None:
            self.batch_size = getattr(loader, "batch_size", None) or settings.batch_size_of(batch)
        self._check_step_named()

    def _check_step_named(self):
        """A script that never calls optimizer.step() is told how to name its step, not left waiting."""
        if self.step_kind in ("auto", "optimizer") and not self.ends and max(self.calls, self.batches) >= NO_STEP_AFTER:
            self.stage = "no step"
            raise Measured

    # --- the stages, driven by step ends ----------------------------------------------------------
    def step_end(self):
        with doctor_work("ending a step"):
            self._step_end()

    def _step_end(self):
        self.ends += 1
        self._last_end = time.perf_counter()
        a = self.args
        if self.stage == "warm-up":
            if self.device is None:
                self.device = self._device()
                # the script's host reads, wrapped from here on so that the warm-up's pace, which plans the
                # timed steps, carries the wrappers' cost too; counted from the timed steps on
                self._syncs = SyncLines(Path(a.script), self.device.type == "cuda")
                self._syncs.install()
            synchronize(self.device)  # note: this is a sync point, after each untimed warm-up step only
            self._warm.append(time.perf_counter())
            if len(self._warm) >= a.warmup:
                self._settle()
        elif self.stage == "settling":
            self._settling.stepped()
            if not self._settling.more():
                self._start_timed()
        elif self.stage == "timed steps":
            i = self.ends - self.timed_from
            self.timer.stop(i - 1)
            over = i >= MIN_TIMED and time.perf_counter() - self.t0 >= a.time  # --time bounds it, as it says
            if i < self.timed_n and not over:
                self._begin_timed_step(i)
            else:
                self._end_timed(i)
                pace_s = self.result.timing.summary.mean_ms / 1000 if self.result else 0.0
                if i < self.timed_n and pace_s > SLOWER * self._warm_step_s:  # not a step's ordinary spread
                    self.notices.append(f"the timed steps ended at --time ({a.time:g} s) after {i} of the "
                                        f"{self.timed_n} the warm-up's pace planned: the steps got slower "
                                        f"({pace_s * 1000:.1f} ms against {self._warm_step_s * 1000:.1f} in the "
                                        "warm-up)")
                self._start_profiled()
        elif self.stage == "profiled steps":
            self.prof.step()
            mark_rank(self.prof)
            if self.ends - self.profiled_from > a.profile_steps:
                self._end_profiled()
                self._start_counted()
        elif self.stage == "flop count":
            self._end_counted()
        if self.stage == "measured":
            raise Measured

    def _device(self) -> torch.device:
        """Where the script computes: its optimizer's parameters, else its model's, else CUDA if it started it."""
        for p in self._parameters():
            return p.device if p.device.type in ("cuda", "cpu") else torch.device("cpu")
        return torch.device("cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu")

    def _parameters(self):
        if self.first_optimizer is not None:
            for group in self.first_optimizer.param_groups:
                yield from group["params"]

    def _settle(self):
        """Untimed steps until the loader's queue of ready batches drains to its steady level (a
        multi-process DataLoader's; none for other streams): stages.Settling."""
        self._settling = Settling(self._feeding)
        if self._settling.more():
            self.stage = "settling"
        else:
            self._start_timed()

    def _start_timed(self):
        a, d = self.args, self.device
        began = self._began or self._warm[0]
        steps = [b - a_ for a_, b in zip([began] + self._warm, self._warm)]
        per_step, period = pace(steps[1:])  # the first holds compilation and autotuning
        per_step = per_step or steps[0]
        # as many steps as fit the time budget, between MIN_TIMED and --steps, in whole periods
        self.timed_n = whole(int(min(a.steps, max(MIN_TIMED, math.ceil(a.time / max(per_step, 1e-6))))), period,
                             a.steps)
        self._warm_step_s = per_step
        self.warm_s, self.first_step_s = self._warm[-1] - began, steps[0]
        self.phases = Phases(Ranges(d), PhaseTimer(d))
        self.monitor = GpuMonitor(d)
        if self.monitor.notice:
            self.notices.append(self.monitor.notice)
        print(f"doctor: warm-up done ({a.warmup} steps); timing {self.timed_n} steps", flush=True)
        memory.reset_peak(d)
        self.timer, self.data_host = StepTimer(d, self.timed_n), [0.0] * self.timed_n
        self.cpu = cpu_time.Clock()
        self.machine = contention.Window().__enter__()  # what else ran on these cores while the steps were timed
        self.monitor.__enter__()
        self._queued = ready(self._feeding)
        self.stage, self.timed_from, self.t0 = "timed steps", self.ends, time.perf_counter()
        # the script's own host reads, line by line, counted over every measured step: a read every 10th
        # step is 0.1 per step, which a few profiled steps would read as 0 or 0.33
        self._syncs.counts.clear()
        self._begin_timed_step(0)

    def _begin_timed_step(self, i):
        self.phases.step = i
        self.timer.start(i)

    def _end_timed(self, n):
        self.phases.step = None
        after = ready(self._feeding)  # before the sync below, which lets the workers fill the queue again
        step_ms = self.timer.step_ms(n)  # the one sync of the timed stretch, after its last step
        wall_s = self._last_end - self.t0  # to the last timed step's end, not what the script did after it
        self.machine.__exit__(None, None, None)
        self.monitor.__exit__(None, None, None)
        cpu_ms, worker_ms = self.cpu.ms_per_step(n)
        peak = memory.timed_peak(self.device, self.phases.timer)
        phase_ms = {p: ms[:n] for p, ms in self.phases.timer.phase_ms().items()}
        # the data phase's CUDA events measure the GPU's wait across the fetch, as DataTimer's do
        host_median_ms, host_share, wait = data_shares([h * 1000 for h in self.data_host[:n]],
                                                       phase_ms.get("data") if self.device.type == "cuda" else None,
                                                       step_ms, wall_s)
        batch = self.batch_size or 1
        workers = max((s.num_workers for s in self.loaders.values()), default=None)
        per_step = self.timed_batches / n if self.loaders else 1.0
        if per_step > 1.05:  # gradient accumulation: a step holds several of the loader's batches
            batch = round(batch * per_step)
            self.notices.append(f"{per_step:.1f} DataLoader batches per step (gradient accumulation?): a step's "
                                f"samples count all of them, batch {batch}")
        if len(self.stepped) > 1 or any(k != n for k in self.stepped.values()):
            steps = ", ".join(f"{name} {k / n:.1f}" for name, k in self.stepped.items())
            self.notices.append(f"optimizer steps per step: {steps}; a step ends at each step of "
                                f"{self.optimizers[id(self.first_optimizer)]}")
        fig = figure(step_ms, self.timer, batch, phase_ms, workers)
        fast = drained(self._queued, after, n)
        if fast:
            self.notices.append(fast)
        timing = Timing(step_ms=step_ms, summary=fig.summary, warmup_steps=self.args.warmup,
                        warmup_s=self.warm_s, first_step_s=self.first_step_s, timed_wall_s=wall_s,
                        cpu_ms_per_step=cpu_ms, worker_cpu_ms_per_step=worker_ms,
                        host_data_ms_median=host_median_ms,
                        host_data_share=host_share, data_wait_share=wait,
                        phase_ms={p: stats.summarize(ms, batch) for p, ms in phase_ms.items()},
                        phase_peak_mb=self.phases.timer.peaks or None, bursts=fig.bursts,
                        whole_steps=fig.whole_steps, queue_drained=fast)
        a = self.args
        self.result = RunResult(
            recipe="doctor", workload=Path(a.script).stem, pair=Path(a.script).stem, variant="doctor", status="ok",
            device=self.device.type, smoke=False, env=stamp.take(self.device), data_source=None, notices=self.notices,
            config=Config(batch_size=batch, steps=n, warmup=a.warmup, profile_steps=a.profile_steps, image_size=None,
                          seed=0, data=None),
            total_s=0.0, timing=timing, memory=peak, gpu_monitor=self.monitor.report())
        self.result.warnings = self.result.gpu_monitor.warnings
        self.result.load = self.machine.load
        if self.batch_size is None:
            self.notices.append("batch size not seen (no tensor in a batch or a model call): samples/s are steps/s")

    # The doctor's own tools may fail where the script is fine (the script runs its own profiler, an
    # op the FLOP counter refuses): what was measured stands, the failure is noted, the doctor goes on.
    def _failed(self, what: str, e: Exception) -> None:
        self.notices.append(f"{what} failed ({type(e).__name__}: {str(e)[:160]}): left out")

    def _start_profiled(self):
        a = self.args
        if not a.profile_steps:
            self._stop_syncs()
            self._start_counted()
            return
        print(f"doctor: profiling {a.profile_steps} steps (+1 warm-up)", flush=True)
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events")  # one cycle: nothing cleared
        stem = Path(a.script).stem
        (Path(a.trace_dir) / f"{stem}.pt.trace.json").unlink(missing_ok=True)  # an earlier run's is not this one's
        try:
            self._prof_cm = profiler(Path(a.trace_dir), stem, self.device, a.profile_steps)
            self.prof = self._prof_cm.__enter__()
        except Exception as e:
            self.prof = None
            self._failed("the profiler", e)
            self._stop_syncs()
            self._start_counted()
            return
        self.phases.profiling = True
        self.stage, self.profiled_from = "profiled steps", self.ends

    def _stop_syncs(self):
        """The host reads' count ends with the measured steps (timed and profiled)."""
        if self._syncs is not None and self._syncs.installed:
            self._syncs.uninstall()
            self._syncs.steps = self.ends - self.timed_from if self.timed_from is not None else 0

    def _end_profiled(self):
        self._stop_syncs()
        self.phases.profiling = False
        for name in list(self._open):  # a phase still open closes before the profiler stops
            self._leave(name)
        try:
            self._prof_cm.__exit__(None, None, None)
        except Exception as e:
            self.prof = None
            self._failed("the profiler", e)

    def _start_counted(self):
        self.stage = "flop count"
        self._count_cm = contextlib.ExitStack()
        try:
            self._count_cm.enter_context(eager_compiled())
            self.counter = self._count_cm.enter_context(FlopCounterMode(display=False))
        except Exception as e:
            self._count_cm.close()
            self._failed("the FLOP count", e)
            self.stage = "measured"

    def _end_counted(self):
        self.stage = "measured"
        try:
            self._count_cm.close()
            self.result.flops_per_step = self.counter.get_total_flops() or None
        except Exception as e:
            self._failed("the FLOP count", e)

    # --- after the script -------------------------------------------------------------------------
    def out_of_memory(self, e: BaseException, recorder: "memory.OomRecorder | None") -> OutOfMemory:
        """Where the script ran out of memory, which memory (as its error says), and on CUDA the
        allocator's figures (as its out-of-memory observer last saw them fail, else read now) and the
        snapshot of the recorded history. Whatever cannot be read is said; the record is always made."""
        message = " ".join(str(e).split())
        found = OutOfMemory(env=None, device=oom_device(e, message), stage=self.stage, steps_seen=self.ends,
                            message=message[:600])
        cuda = found.device == "cuda" and torch.cuda.is_initialized()
        if cuda and recorder:  # first: host-side only, it outlives a CUDA context the error broke
            if path := recorder.at_error():
                found.snapshot, found.view_snapshot = path, memory.how_to_view(Path(path))
            else:
                found.notes.append(f"no snapshot: {recorder.unavailable}")
        try:
            found.env = stamp.take(self.device or torch.device("cuda" if cuda else "cpu"))
            if not cuda:
                return found
            seen = recorder.seen if recorder else None
            found.at_failure = seen is not None and isinstance(e, torch.OutOfMemoryError)
            if recorder and recorder.observer_failed:
                found.notes.append(f"the allocator's out-of-memory observer failed ({recorder.observer_failed}): "
                                   "the figures are read where the error was caught")
            if found.at_failure and recorder.failures > 1:
                found.notes.append(f"the allocator failed {recorder.failures} times before the script ended: "
                                   "the figures are the last failure's (cuDNN retries a smaller workspace; "
                                   "a script may catch its OOM and try again)")
            seen = seen if found.at_failure else memory.figures_at_error(message)
            mb = lambda key: None if seen.get(key) is None else seen[key] / 2**20  # noqa: E731
            found.requested_mb, found.allocated_mb, found.reserved_mb = mb("requested"), mb("allocated"), mb("reserved")
            # a request over 1 MiB comes from the large pool: the small pool's split blocks can never serve it
            large = seen.get("requested") is not None and seen["requested"] > 2**20
            found.inactive_split_mb = mb("inactive_split_large" if large else "inactive_split")
            found.free_mb, found.allowed_mb = mb("free"), mb("allowed")
            found.expandable_segments = memory.expandable_segments(recorder)
        except Exception as failed:  # an error that also broke CUDA's context: the figures it could not give
            found.notes.append(f"the device's figures could not be read ({type(failed).__name__}: {failed})")
        if found.env is None:
            found.env = stamp.take(torch.device("cpu"))
        return found

    def finish(self, how: str) -> Observation:
        """What was measured, whatever stage the script ended in."""
        for it in self.watched:
            shut_down(it.it)
        self._stop_syncs()
        if self.stage == "timed steps":
            done = self.ends - self.timed_from
            if done >= MIN_TIMED:
                self._end_timed(done)
                self.notices.append(f"the script ended after {done} of {self.timed_n} timed steps: no profiled steps")
        elif self.stage == "profiled steps":
            self._end_profiled()
            self.notices.append("the script ended during the profiled steps")
        elif self.stage == "flop count":
            with contextlib.suppress(Exception):
                self._count_cm.close()
        if self.prof is not None and self.result is not None:
            try:
                self.result.evidence = self._evidence()
            except Exception as e:  # what was timed stands; the cookbook's own failure is said as its own
                self._failed("the cookbook's reading of the profiled steps", e)
        if self.result is not None and self.calls == 0 and compile_stats() is not None:
            self.notices.append("no call of a model seen: a model compiled whole (module.compile()) runs its "
                                "calls inside compiled code, where the doctor's hooks do not run; its forward "
                                "time counts in the rest of the step")
        obs = Observation(script=str(self.args.script), argv=self.args.script_args, step=self.step_kind,
                          steps_seen=self.ends, ended=how, stage=self.stage, optimizers=list(self.optimizers.values()),
                          optimizer_flags=self.flags, zero_grad=self.zero_grad,
                          models=list(self.top_modules.values()), model_calls=self.calls, batches=self.batches,
                          loaders=list(self.loaders.values()), result=self.result, fixes=dict(self.fixes.said),
                          cwd=self.cwd, sync_lines=self._sync_lines(),
                          loss_scaling=self.fixes.loss_scale.record() if self.fixes.loss_scale else None)
        if self.result is not None:
            self.result.compile, self.result.total_s = compile_stats(), time.perf_counter() - self.t_start
            # note: this is a sync point, after the script stopped
            self.result.losses = torch.stack([x.float() for x in self.losses]).cpu().tolist() if self.losses else []
            if self.result.evidence is not None:
                obs.ops = settings.read(Path(self.result.evidence.trace))
        return obs

    def _sync_lines(self) -> dict[str, float]:
        """Host reads per step at each line, over every measured step (timed, profiled, the profiler's warm-up)."""
        if self._syncs is None:
            return {}
        return {k: v / max(1, self._syncs.steps) for k, v in self._syncs.counts.items()}

    def _evidence(self) -> Evidence | None:
        """The profiled steps' evidence, over as many steps as the trace holds (the script may have ended early)."""
        if not Path(self.prof.trace_path).exists():
            return None
        return read_evidence(self.prof, self.device, optimizers=list(self.optimizer_objects.values()))


class Watched:
    """A DataLoader's iterator, its `next` timed (the data phase) and counted."""

    def __init__(self, it, loader, observer: Observer):
        self.it, self.loader, self.observer = it, loader, observer
        observer.watched.append(self)

    def __iter__(self):
        return self

    def __next__(self):
        return self.observer.draw(lambda: next(self.it), self.loader, self.it)

    def __len__(self):
        return len(self.it)

    def __getattr__(self, name):
        return getattr(self.it, name)


def step_aside(folder: Path) -> dict:
    """Where the script's folder has a `common` of its own (common.py, a common/ package), the
    cookbook's modules of that name leave sys.modules while the script runs, so that its `import
    common` finds its own; every module of the cookbook's is imported by then and bound where it is
    used. Returns them, to put back after the script."""
    if not ((folder / "common.py").exists() or (folder / "common" / "__init__.py").exists()):
        return {}
    names = [name for name in sys.modules if name == "common" or name.startswith("common.")]
    return {name: sys.modules.pop(name) for name in names}


def user_traceback(exc: BaseException, script: Path) -> str:
    """The script's own traceback, from its first frame: the doctor's frames are not the user's concern."""
    tb = exc.__traceback__
    while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve() != script:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb if tb is not None else exc.__traceback__))


def parse_args(argv):
    p = OneLineParser(prog="python -m common.measure.observer", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--trace-dir", required=True)
    p.add_argument("--fix", action="append", default=[], help="apply one of the doctor's fixes (repeatable)")
    p.add_argument("--cwd", help="the folder the script runs in (default: the script's own)")
    p.add_argument("--oom-snapshot", metavar="PICKLE",
                   help="record the CUDA allocator's history from the start and dump it here if the script runs "
                        "out of memory (the doctor's second run of a script that did)")
    add_doctor_flags(p)
    own, rest = split_passthrough(argv)
    args = p.parse_args(own)
    if not rest:
        p.error("give the script after --: ... -- path/to/train.py its args")
    args.script, args.script_args = str(Path(rest[0]).resolve()), rest[1:]
    args.out, args.trace_dir = str(Path(args.out).absolute()), str(Path(args.trace_dir).absolute())  # before chdir
    args.oom_snapshot = args.oom_snapshot and str(Path(args.oom_snapshot).absolute())
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    script = Path(args.script)
    interrupt_on_sigterm()  # a kill ends like Ctrl-C: nothing written
    os.environ[env.PLAIN_ENV] = "1"  # a harness script steps aside (harness.Run.loop)
    sys.argv = [str(script), *args.script_args]
    # started in the cookbook's folder, so that `-m common...` cannot find a `common` of the script's;
    # then into the script's folder (or --cwd), as `cd folder && python train.py`
    os.chdir(args.cwd or script.parent)
    sys.path.insert(0, str(script.parent))  # as `python train.py` puts its folder first
    random.seed(0)  # every run of the script starts from the same random state
    torch.manual_seed(0)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(0)
    recorder = memory.OomRecorder(Path(args.oom_snapshot)) if args.oom_snapshot else None  # as CUDA starts
    observer = Observer(args)
    observer.install()
    how = "script ended"
    shadowed = step_aside(script.parent)
    try:
        runpy.run_path(str(script), run_name="__main__")
    except Measured:
        how = "stopped" if observer.stage == "measured" else "no step"
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"doctor: the script exited with status {e.code}; no report", file=sys.stderr)
            return e.code if isinstance(e.code, int) else 1
        how = "script exited"
    except KeyboardInterrupt:
        print("doctor: interrupted: no report written", file=sys.stderr)
        return 130
    except CookbookFault as e:
        return cookbook_fault(e)
    except BaseException as e:  # the script's own error: its traceback, as the user needs it
        sys.stderr.write(user_traceback(e, script))
        if is_oom(e):  # while its frames still hold what filled the memory
            write_result(oom_path(Path(args.out)), observer.out_of_memory(e, recorder))
            print(f"doctor: the script ran out of memory ({observer.stage}, after {observer.ends} steps)",
                  file=sys.stderr)
            return EXIT_OOM
        print(f"doctor: the script raised {type(e).__name__} (traceback above); no report", file=sys.stderr)
        return 1
    finally:
        observer.uninstall()
        sys.modules.update(shadowed)
    try:
        obs = observer.finish(how)
    except Exception as e:  # after the script: whatever fails here is the doctor's own
        return cookbook_fault(CookbookFault(f"reading what it measured: {type(e).__name__}: {e}"), e)
    write_result(Path(args.out), obs)
    return 0


def cookbook_fault(fault: CookbookFault, cause: BaseException | None = None) -> int:
    """The doctor's bug: its whole traceback, and the script is not blamed."""
    traceback.print_exception(cause or fault)
    print(f"doctor: the cookbook's own code failed ({fault}), not your script: a bug in the cookbook, please "
          "report it with the traceback above; no report", file=sys.stderr)
    return EXIT_COOKBOOK_FAULT


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the script runs as __main__ too (runpy swaps
    # sys.modules["__main__"] for its namespace), and torch.compile's guards on the hooks defined
    # here look their globals up through their module's name, which would then be the script's
    from common.measure import observer

    sys.exit(observer.main())
