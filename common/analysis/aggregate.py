"""From runs to figures: a variant's processes aggregated, and the parity check of two variants.
Shared by the recipe runner (compare), the ladder and the sweeps."""
import math
from dataclasses import fields
from statistics import fmean, median

from common.analysis import ceiling, stats
from common.analysis.results_compare import MEAN, HostFigures, Parity, VariantAggregate
from common.analysis.results_run import RunResult


def aggregate(runs: list[RunResult]) -> VariantAggregate:
    """One variant over its processes: the median of the per-process figures (each its timed
    stretch's time over its steps), their spread, the pooled steps' median and tail, where the steps
    came in bursts, and the evidence of the profiled (first) run."""
    first = runs[0]
    base = dict(config=first.config, env=first.env, data_source=first.data_source, notices=first.notices,
                warnings=sorted({w for r in runs for w in r.warnings}))
    oom = next((r for r in runs if r.status == "oom"), None)
    if oom:
        return VariantAggregate(status="oom", oom=oom.oom, **{**base, "config": oom.config})
    figures = [r.timing.summary.mean_ms for r in runs]
    pooled = stats.summarize([ms for r in runs for ms in r.timing.step_ms], first.config.samples_per_step)
    host = HostFigures()
    for f in fields(HostFigures):  # each the median of the Timing field of the same name
        values = [getattr(r.timing, f.name) for r in runs if getattr(r.timing, f.name) is not None]
        setattr(host, f.name, median(values) if values else None)
    profiled = next((r for r in runs if r.evidence is not None or r.unread is not None), first)
    figure = median(figures)
    return VariantAggregate(
        status="ok", **base, process_ms=figures, step_ms=figure, statistic=MEAN, between_cv=stats.cv(figures),
        within_cv=median(r.timing.summary.cv for r in runs), pooled=pooled,
        throughput_per_s=first.config.samples_per_step * 1000.0 / figure if figure > 0 else 0.0,
        bursts=[r.timing.bursts for r in runs],
        load=max((r.load for r in runs if r.load is not None), key=lambda x: x.others_cores, default=None),
        warmup_s=[r.timing.warmup_s for r in runs], host=host,
        memory=max((r.memory for r in runs), key=lambda m: m.peak_mb),
        evidence=profiled.evidence, flops_per_step=profiled.flops_per_step, bytes_per_step=first.bytes_per_step,
        compile=profiled.compile, gpu_monitor=first.gpu_monitor, ceiling=ceiling.cached(first.env), extra=first.extra,
        unread=profiled.unread)


# The learning probe: what a twin must match once both train on one batch again and again. Any model
# fits one batch fast (ResNet-18 from 2.4 to 0.03 in 4 steps, the churn MLP halves its loss in 10), so
# a twin that stops learning or learns at another rate is 25-100% off the slow twin there, while a
# correct AMP twin stays within 2.1% (measured at batches 2-4096 on CPU).
PROBE_RTOL = 0.1
PROBE_LEARNS, PROBE_MIN_DROP = 0.5, 0.1  # the fast twin's own drop, against the slow one's where it is 10%+
# fp16's GradScaler starts at a loss scale of 2**16 and halves it at each overflow, skipping that step's
# update, until the scale fits: at most 16 skips, all early. More, or later, is a scale that never settles.
CALIBRATION_STEPS = 16


# Where the twins' dropout draws other masks after the stretch they share (a 16-bit twin against fp32
# on CUDA, whose fused kernel draws per 16-byte vector; an A/A's reseeded role; a twin whose dropout runs
# out of Python's reach), their windows differ by what a fresh dropout stream moves a trajectory. Measured
# as the churn slow twin against itself with its dropout reseeded, the worst 10-step window: 3.7-5.1% of
# the initial loss over 420 steps on an H200 (8 runs of 4 seeds), 5.5% in its A/A over ~570 steps
# (reports/archive/h200-2026-11-27), up to 3.7% on a CPU (docs/measurement.md); 1.8x the worst. A twin
# that stops learning is 22-82% off.
RESEEDED_RTOL = 0.10


def masks_differ(slow: RunResult, fast: RunResult) -> bool:
    """Whether the twins' dropout may draw other masks once the shared stretch ends: a reseeded role;
    another set of input dtypes where the device's dropout draws per dtype (CUDA; a CPU draws fp32's
    mask whatever the dtype); a twin whose dropout no Python call reached (a replayed CUDA graph's, a
    compiled one's). Without the record (a result of an older version), as before: the same masks."""
    a, b = getattr(slow, "randomness", None), getattr(fast, "randomness", None)
    if a is None or b is None or not (a.calls or b.calls):
        return False
    if a.reseeded_at is not None or b.reseeded_at is not None or not (a.calls and b.calls):
        return True
    return a.dtypes != b.dtypes and (a.per_dtype or b.per_dtype)


def early_tolerance(rule: dict, batch_size: int) -> float:
    """The early steps' tolerance at this batch size. A batch's mean loss averages its samples' rounding
    errors, so their relative noise falls as 1/sqrt(batch): `early_rtol` is measured at `at_batch`
    and widens by sqrt(at_batch / batch) below it (never narrows above it)."""
    return rule["early_rtol"] * math.sqrt(max(1.0, rule.get("at_batch", 1) / max(batch_size, 1)))


def parity(slow: RunResult, fast: RunResult, rule: dict) -> Parity:
    """Do the twins train the same? Both see the same weights and batches, so:
    - early: the first steps agree step by step, within the tolerance for the batch size (a wrong
      cast shows at once);
    - trajectory: means over windows of steps stay close, measured against the initial loss so that
      losses near zero do not blow the ratio up (a run that diverges shows here);
    - probe: after the warm-up, both train on one batch for a few steps (measure.stages.probed) and must
      fit it alike, where the early steps are compared: fresh batches' noise can hide a twin that stops
      learning for hundreds of steps; the probe shows it in a few, at any batch size;
    - every loss of the fast twin is finite.
    The probe starts where the warm-up ends, which both twins reach alike, puts the training state
    back when it ends, and keeps its losses apart: step k of `losses` is the k-th step outside the
    probe in both twins, the same batch from the same state, whichever stage (timed, profiled,
    counted) ran it. A twin that timed more steps to fill its minimum time is compared over the
    steps both ran. A serving rule (one with `atol`) compares answers instead: answers_parity."""
    if "atol" in rule:
        return answers_parity(slow, fast, rule)
    what, rtol = rule.get("what", "training loss"), rule["rtol"]
    agreed = {}
    for fact in rule.get("same") or ():
        a, b = slow.extra.get(fact), fast.extra.get(fact)
        if a is None or b is None:
            return Parity(ok=False, what=what, rtol=rtol, why=f"the {'slow' if a is None else 'fast'} twin recorded no "
                                                             f"`{fact}`: its model was not built as the rule expects")
        if a != b:
            return Parity(ok=False, what=what, rtol=rtol, why=f"the twins' models differ in `{fact}`: {a} (slow), "
                                                             f"{b} (fast)")
        want = (rule.get("expect") or {}).get(fact, a)
        if a != want:
            return Parity(ok=False, what=what, rtol=rtol, why=f"both twins' models have `{fact}` {a}, not {want}")
        agreed[fact] = a
    n = min(len(slow.losses), len(fast.losses))
    if n == 0:
        return Parity(ok=False, what=what, rtol=rtol, why=f"loss trajectories of {len(slow.losses)} and "
                                                           f"{len(fast.losses)} steps")
    a, b = slow.losses[:n], fast.losses[:n]
    batch = slow.config.batch_size
    early_rtol = early_tolerance(rule, batch)
    k = min(rule["early_steps"], n)  # 0: the twins' data differ step by step, compare windows only
    skipped = sorted(set(fast.skipped_steps) - set(slow.skipped_steps))
    early_skipped = bool(skipped) or fast.probe_skipped > slow.probe_skipped
    if early_skipped:  # the fast twin is some updates behind: steps and the probe are not comparable one by one
        k = 0
        if len(skipped) + fast.probe_skipped > CALIBRATION_STEPS or (skipped and skipped[-1] >= 2 * CALIBRATION_STEPS):
            return Parity(ok=False, what=what, rtol=rtol, skipped_steps=skipped,
                          why=f"the fast twin skipped {len(skipped) + fast.probe_skipped} optimizer updates (steps "
                              f"{skipped_words(skipped)}): a loss scale that never settles (fp16 overflowing), not the "
                              f"calibration of its first steps")
        b = by_updates(fast.losses, skipped)  # each loss beside the slow twin's after as many updates
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
        # lined up by updates, the twins' windows hold different batches: their noise falls as
        # 1/sqrt(batch), as the early steps' does, so the window tolerance widens by the same law
        rtol = rtol * math.sqrt(max(1.0, rule.get("at_batch", 1) / max(batch, 1)))
    # the masks are the same by construction over the shared stretch only, where the twins' own differ
    differ = masks_differ(slow, fast)
    shared = min(slow.randomness.shared_steps, fast.randomness.shared_steps) if differ else n
    if differ and (early_skipped or not (slow.randomness.calls and fast.randomness.calls)):
        shared = 0  # lined up by updates, or one twin's dropout out of reach: no step drew the same masks
    k = min(k, shared)
    early = [abs(y - x) / max(abs(x), 1e-6) for x, y in zip(a[:k], b[:k])] or [0.0]
    w = min(rule["window"], n)
    scale = max(abs(fmean(a[:w])), 1e-6)
    starts = list(range(0, n - w + 1, w))[:rule.get("max_windows")]  # max_windows: only the first ones
    windows = [abs(fmean(b[i:i + w]) - fmean(a[i:i + w])) / scale for i in starts]
    tolerances = [rtol if i + w <= shared else max(rtol, RESEEDED_RTOL) for i in starts]
    worst = max(range(len(windows)), key=lambda j: windows[j] / tolerances[j])
    reseeded_from = shared if differ and shared < n else None
    finite = all(math.isfinite(v) for v in fast.losses + fast.probe_losses)
    # the probe compares step by step: where the steps are comparable (early_steps > 0), and where a
    # rule gives its own, looser probe_rtol (dropout masks or micro-batch statistics differ between the
    # twins, yet a twin that stops learning is far further off); not for the ladder's later rungs
    compared = (k or "probe_rtol" in rule) and not early_skipped
    probe = _probe(slow.probe_losses, fast.probe_losses) if compared else None
    probe_rtol = rule.get("probe_rtol", PROBE_RTOL)
    # and it must learn: cut its own probe loss by at least half as much as the slow twin cut its own,
    # which a twin whose steps update nothing cannot, however different the twins' batches make them
    learns = probe is None or probe[1] < PROBE_MIN_DROP or probe[2] >= PROBE_LEARNS * probe[1]
    probe_ok = probe is None or (probe[0] <= probe_rtol and learns)
    return Parity(ok=finite and max(early) <= early_rtol and windows[worst] <= tolerances[worst] and probe_ok,
                  what=what, rtol=tolerances[worst], early_max_rel=max(early), early_steps=k, early_rtol=early_rtol,
                  max_rel=windows[worst], at_step=worst * w, window=w, steps=n, finite=finite,
                  windows_compared=not rule.get("max_windows"),
                  batch_size=batch, probe_steps=min(len(slow.probe_losses), len(fast.probe_losses)),
                  probe_max_rel=probe[0] if probe else None, probe_rtol=probe_rtol if probe else 0.0,
                  probe_drop=probe[1] if probe else None, probe_fast_drop=probe[2] if probe else None,
                  skipped_steps=skipped, early_skipped=early_skipped, masks_shared_until=reseeded_from,
                  window_rtol=rtol if reseeded_from is not None else None, agreed=agreed or None)


def answers_parity(slow: RunResult, fast: RunResult, rule: dict) -> Parity:
    """Do the twins serve the same answers? Every request's answer of the first batches both kept
    (RunResult.answers), in order, within `atol` of the slow twin's: a twin that answers an earlier
    batch, or the right answers to the wrong customers, is off by far more on trained weights."""
    what, atol = rule.get("what", "answer per request"), rule["atol"]
    pairs = list(zip(slow.answers, fast.answers))
    if not pairs or any(len(a) != len(b) for a, b in pairs):
        return Parity(ok=False, what=what, rtol=0.0, atol=atol,
                      why=f"answers of {[len(a) for a in slow.answers]} and {[len(b) for b in fast.answers]} "
                          "requests per batch (slow, fast)")
    worst, at = -1.0, (0, 0)
    finite = all(math.isfinite(y) for b in fast.answers for y in b)
    for i, (a, b) in enumerate(pairs):
        for j, (x, y) in enumerate(zip(a, b)):
            d = abs(y - x) if math.isfinite(y) else math.inf
            if d > worst:
                worst, at = d, (i, j)
    return Parity(ok=finite and worst <= atol, what=what, rtol=0.0, atol=atol, max_abs=worst, at_answer=at,
                  answers_compared=sum(len(a) for a, _ in pairs), steps=len(pairs), finite=finite,
                  batch_size=len(pairs[0][0]))


def by_updates(losses: list[float], skipped: list[int]) -> list[float]:
    """The losses one per update count: a step after a skipped one starts from the same weights as
    that one did, so its loss is left out; what remains lines up with a twin that skipped none."""
    after = {i + 1 for i in skipped}
    return [x for i, x in enumerate(losses) if i not in after]


def skipped_words(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "") if steps else "in the probe"


def _probe(a: list[float], b: list[float]) -> tuple[float, float, float] | None:
    """(the largest gap of the twins' probe losses, the slow twin's drop, the fast twin's drop), the
    gap and the slow drop as shares of the slow twin's first probe loss, the fast drop of its own
    first; None without a probe in both."""
    n = min(len(a), len(b))
    if n == 0:
        return None
    first = max(abs(a[0]), 1e-6)
    return (max(abs(y - x) for x, y in zip(a[:n], b[:n])) / first, (a[0] - min(a[:n])) / first,
            (b[0] - min(b[:n])) / max(abs(b[0]), 1e-6))


def parity_failure(par: Parity) -> str:
    if par.max_abs is not None:  # serving
        b, r = par.at_answer
        return (f"the fast twin's answer to request {r} of served batch {b} differs from the slow twin's by "
                f"{par.max_abs:.3g} (tolerance {par.atol:.3g}, {par.answers_compared} answers compared in order): "
                "it answers other requests, or other customers, than the slow twin")
    if par.max_rel is None:
        return par.why or "no losses to compare"
    if not par.finite:
        return "the fast twin's loss is not finite (NaN or inf)"
    if par.early_max_rel > par.early_rtol:
        return (f"the first {par.early_steps} steps' losses differ by up to {par.early_max_rel:.2%} "
                f"(tolerance {par.early_rtol * 100:.4g}% at batch {par.batch_size})")
    if par.probe_fast_drop is not None and par.probe_drop >= PROBE_MIN_DROP \
            and par.probe_fast_drop < PROBE_LEARNS * par.probe_drop:
        return (f"on the learning probe ({par.probe_steps} steps on one batch) the fast twin cut its loss by "
                f"{par.probe_fast_drop:.0%} where the slow twin cut its own by {par.probe_drop:.0%}: it does not "
                "learn as the slow one does (its steps may update nothing)")
    if par.probe_max_rel is not None and par.probe_max_rel > par.probe_rtol:
        return (f"on the learning probe ({par.probe_steps} steps on one batch) the losses differ by up to "
                f"{par.probe_max_rel:.2%} of the first (tolerance {par.probe_rtol * 100:.4g}%; the slow twin cut its "
                f"loss by {par.probe_drop:.0%}): the fast twin does not learn as the slow one does")
    return (f"the {par.window}-step mean loss differs by {par.max_rel:.2%} of the initial loss at steps "
            f"{par.at_step}-{par.at_step + par.window - 1} (tolerance {par.rtol * 100:.4g}%{masks_words(par)})")


def masks_words(par: Parity) -> str:
    """How the windows were judged where the twins' dropout masks stop being shared (empty where they never do)."""
    if par.masks_shared_until is None:
        return ""
    return (f"; dropout masks shared over the first {par.masks_shared_until} steps and the probe, then each twin's "
            f"own: windows after them judged against a reseeded twin's spread, {RESEEDED_RTOL:.0%}, those before at "
            f"{par.window_rtol * 100:.4g}%")
