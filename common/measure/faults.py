"""Fault injection for testing the runners on a CPU, through COOKBOOK_FAULT:

- "oom:fast" (or "crash:slow:churn", or "crash:fast:churn:1" for rank 1 of a torchrun launch only)
  makes the matching variant (and workload, and rank) fail at its first timed step;
- "pace:1,1.5,2" stretches every step of a process by a factor, as a loaded host does: the slow
  twin of round r takes the r-th factor and the fast twin the next one (cyclically), so that in an
  A/A over as many rounds as factors both twins meet every pace once, neither favoured, while the
  twins of one round run at different paces and time different numbers of steps;
- "waits:6/16,1,1" makes every batch of the slow twin wait 6 ms and the fast twin's wait 16, 1 and 1 ms
  in turn (the same 6 ms on average, as three loader workers' batches arriving together): twins of one
  throughput whose steps come in bursts, which no statistic of single steps may call different;
- "fix:zero_lr" lets the doctor's --try name a fix that zeroes the learning rate
  (analysis.fixes.BROKEN), which its parity check must fail;
- "frozen:fast" (or "frozen:fast:churn") plants a broken twin: every optimizer step of the matching
  variant updates nothing (its learning rates set to 0 as it steps), a twin that has lost its
  optimizer step, which parity must fail in every training recipe;
- "delay:fast:0.2" (or "delay:slow:0.2:churn") makes every forward of the matching served twin
  (common/server.py) take that many seconds longer: an overloaded server, for its 503s and its drain;
- "stale:fast" (or "shuffled:fast[:churn_serving]") plants a broken serving twin: it answers each
  batch with the previous batch's answers (a replay that read a stale input buffer), or with its
  own answers in another order (answers handed to the wrong customers), which parity must fail;
- "overflow:3" makes the doctor's fp16 loss scaling (common.measure.fixes.LossScale) see inf gradients at
  the script's 3rd backward: a planted overflow, whose step must be skipped and the scale backed off;
- "slow-client:20" makes the serving runner's load generator (common/runners/load.py, which reads it)
  block 20 ms per request it sends: a client that saturates before the server.

The variant is the run's role in its comparison (RUN_ENV, which the recipe runner sets: under
`--aa` the slow script plays both roles), else the script's own. Both wrap the batch stream, so
nothing of them sits inside the harness's timed loop."""
import os
import time

import torch

from common import env

ENV = env.FAULT_ENV
KINDS = ("oom", "crash")


def role(variant: str) -> tuple[str, int]:
    """(the run's role, its round) as the runner set them in RUN_ENV ("fast:3"); else (variant, 1)."""
    given, _, round_no = os.environ.get(env.RUN_ENV, "").partition(":")
    return given or variant, int(round_no) if round_no.isdigit() else 1


def planned(variant: str, pair: str, workload: str | None = None) -> str | None:
    """The fault kind ("oom" or "crash") meant for this variant and pair (or its workload), if any."""
    spec = os.environ.get(ENV, "")
    kind, _, target = spec.partition(":")
    want_variant, _, rest = target.partition(":")
    want, _, rank = rest.partition(":")
    if kind not in KINDS or want_variant != role(variant)[0] or want not in ("", pair, workload):
        return None
    if rank and rank != str(env.rank_world()[0]):
        return None
    return kind


def frozen(variant: str, pair: str, workload: str | None = None) -> bool:
    """Whether "frozen:<variant>[:<pair or workload>]" is planned for this run."""
    kind, _, target = os.environ.get(ENV, "").partition(":")
    want_variant, _, want = target.partition(":")
    return kind == "frozen" and want_variant == role(variant)[0] and want in ("", pair, workload)


def wrong_answers(variant: str, pair: str, workload: str | None = None):
    """The planted serving fault ("stale" or "shuffled") for this run as a function of each batch's
    answers, or None."""
    kind, _, target = os.environ.get(ENV, "").partition(":")
    want_variant, _, want = target.partition(":")
    if kind not in ("stale", "shuffled") or want_variant != role(variant)[0] or want not in ("", pair, workload):
        return None
    if kind == "shuffled":
        return lambda answers: answers.roll(1, dims=0)  # each answer handed to the next customer
    previous = []

    def stale(answers):
        previous.append(answers.clone())
        return previous.pop(0) if len(previous) > 1 else answers  # the first batch has nothing older
    return stale


def forward_delay(variant: str, pair: str, workload: str | None = None) -> float:
    """The seconds "delay:<variant>:<seconds>[:<pair or workload>]" adds to each served forward; 0 if none."""
    kind, _, target = os.environ.get(ENV, "").partition(":")
    want_variant, _, rest = target.partition(":")
    seconds, _, want = rest.partition(":")
    if kind != "delay" or want_variant != role(variant)[0] or want not in ("", pair, workload):
        return 0.0
    return float(seconds)


def freeze(optimizer, args, kwargs) -> None:
    """A global optimizer step pre-hook: the step that follows updates nothing."""
    for group in optimizer.param_groups:
        group["lr"] = 0.0


def overflow_at() -> int | None:
    """The backward whose scaled loss "overflow:N" makes infinite (1-based), if it is planned."""
    kind, _, value = os.environ.get(ENV, "").partition(":")
    return int(value) if kind == "overflow" and value.isdigit() else None


def pace(variant: str) -> float | None:
    """The factor by which "pace:F1,F2,..." stretches this run's steps, if it is planned."""
    kind, _, values = os.environ.get(ENV, "").partition(":")
    if kind != "pace":
        return None
    factors = [float(v) for v in values.split(",") if v.strip()]
    who, round_no = role(variant)
    return factors[(round_no - 1 + (who != "slow")) % len(factors)] if factors else None


def wrap(batches, kind: str, armed):
    """The batches, raising `kind` at the first batch asked for while armed() (the first timed step)."""
    for batch in batches:
        if armed():
            if kind == "oom":
                raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected by {ENV})")
            raise RuntimeError(f"injected crash ({ENV}={kind})")
        yield batch


def waits(variant: str) -> list[float] | None:
    """The milliseconds "waits:<slow ms,...>/<fast ms,...>" makes this run's batches wait, in turn."""
    kind, _, values = os.environ.get(ENV, "").partition(":")
    if kind != "waits":
        return None
    slow, _, fast = values.partition("/")
    return [float(v) for v in (slow if role(variant)[0] == "slow" else fast or slow).split(",") if v.strip()]


def waiting(batches, pattern_ms: list[float]):
    """The batches, the i-th handed out after waiting pattern_ms[i % len] ms (a loader's arrivals)."""
    for i, batch in enumerate(batches):
        time.sleep(pattern_ms[i % len(pattern_ms)] / 1000)
        yield batch


def paced(batches, factor: float):
    """The batches, each step stretched to `factor` times its own length: the time the script spent
    on the step just handed out, slept again (factor - 1) times before the next batch comes."""
    for batch in batches:
        handed = time.perf_counter()
        yield batch
        time.sleep(max(0.0, factor - 1) * (time.perf_counter() - handed))


class Planted:
    """What COOKBOOK_FAULT plants in one harness run, from outside its code (common.measure.rig hangs it on
    the run's seams): the batch stream wrapped (pace, waits, an injected oom or crash at the first timed
    step), a frozen twin's optimizer hook, a broken serving twin's answers. `stage()` says the run's stage
    (the crash waits for the timed steps)."""

    def __init__(self, variant: str, pair: str, workload: str, stage):
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.variant, self.pair, self.workload, self.stage = variant, pair, workload, stage
        self.hook = register_optimizer_step_pre_hook(freeze) if frozen(variant, pair, workload) else None
        self.answers = wrong_answers(variant, pair, workload)

    def stream(self, batches):
        if (factor := pace(self.variant)) is not None:
            batches = paced(batches, factor)
        if (pattern := waits(self.variant)) is not None:
            batches = waiting(batches, pattern)
        if kind := planned(self.variant, self.pair, self.workload):
            batches = wrap(batches, kind, armed=lambda: self.stage() == "timed steps")
        return batches

    def answer(self, output):
        return self.answers(output) if self.answers is not None else output

    def close(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None


def plant(variant: str, pair: str, workload: str, stage) -> Planted | None:
    """The faults planted for this run, where COOKBOOK_FAULT names any; else None (a user's run)."""
    return Planted(variant, pair, workload, stage) if os.environ.get(ENV) else None
