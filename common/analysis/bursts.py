"""Steps that come in bursts: a period, or two modes, in one process's step times, said as a finding.

A pipeline that delivers in bursts makes single steps unlike each other: two loader workers'
batches arrive together (steps alternate 4 ms and 128 ms), a host sync or a log every N steps, an
optimizer step every N micro-batches. The process's figure is then its mean step over whole periods
(common.analysis.stats); the pattern itself is something the user can act on, so it is found here
and named with its likely cause from the per-step phase times.
"""
import math
from statistics import fmean, median, pstdev

from common.analysis.results_run import Bursts

MAX_PERIOD = 16
EXPLAINED = 0.6  # a period is real when a step's place in it explains this share of the steps' variance
CHANCE = 3.0  # ... and at least this multiple of what the place explains in noise, (p - 1) / (n - 1)
SPREAD = 2.0  # two modes: the slow steps' typical time at least this multiple of the fast steps'
MIN_SHARE, MIN_SLOW = 0.05, 3  # each mode holds at least this share of the steps, and 3 (a lone pause is no pattern)
BIMODAL = 0.75  # ... and the split explains this share of the log times' variance (lognormal jitter does not)
QUIET_CV = 0.15  # steps whose CV is below this are alike: nothing to say


def period(step_ms: list[float], max_period: int = MAX_PERIOD) -> int | None:
    """The smallest p for which a step's place in a cycle of p explains most of the steps' spread
    (a one-way analysis of variance by place), far more than p places explain in noise; None."""
    n = len(step_ms)
    if n < 6:
        return None
    mean = fmean(step_ms)
    total = sum((x - mean) ** 2 for x in step_ms)
    if total <= 0:
        return None
    for p in range(2, min(max_period, n // 3) + 1):
        places = [step_ms[j::p] for j in range(p)]
        between = sum(len(xs) * (fmean(xs) - mean) ** 2 for xs in places)
        if between / total >= max(EXPLAINED, min(0.95, CHANCE * (p - 1) / (n - 1))):
            return p
    return None


def whole_periods(n: int, p: int | None) -> int:
    """The most of n steps that hold whole periods of p (all n without a period, or fewer than one)."""
    return n - n % p if p and n >= p else n


def _split(step_ms: list[float]) -> tuple[list[float], list[float], float] | None:
    """The two groups of steps, split where the log times' within-group spread is least (Otsu's
    threshold in one dimension), and the share of their variance the split explains; None for fewer
    than 4 steps."""
    xs = sorted(math.log(max(x, 1e-9)) for x in step_ms)
    n = len(xs)
    if n < 4:
        return None
    prefix, squares = [0.0], [0.0]
    for x in xs:
        prefix.append(prefix[-1] + x)
        squares.append(squares[-1] + x * x)

    def within(i, j):  # the sum of squares about the mean of xs[i:j]
        s, q, k = prefix[j] - prefix[i], squares[j] - squares[i], j - i
        return q - s * s / k

    cut = min(range(1, n), key=lambda k: within(0, k) + within(k, n))
    total = within(0, n)
    explained = 1 - (within(0, cut) + within(cut, n)) / total if total > 0 else 0.0
    return sorted(step_ms)[:cut], sorted(step_ms)[cut:], explained


def find(step_ms: list[float], phase_ms: dict[str, list[float]] | None = None,
         workers: int | None = None) -> Bursts | None:
    """The step pattern of one process's timed steps, if they come in bursts: a period (steps
    alternate, or repeat a cycle) or two modes (some steps far slower than the rest); None where the
    steps are alike. `phase_ms`: each phase's time per step (the phase timer's), which names the
    cause; `workers`: the DataLoader's worker processes, where known."""
    n = len(step_ms)
    if n < 6 or pstdev(step_ms) < QUIET_CV * fmean(step_ms):
        return None
    p = period(step_ms)
    groups = _split(step_ms)
    if p is not None:
        pattern = [fmean(step_ms[j::p]) for j in range(p)]
        middle = (min(pattern) + max(pattern)) / 2
        slow = [i for i, x in enumerate(step_ms) if pattern[i % p] >= middle]
        if max(pattern) < SPREAD * min(pattern) and max(pattern) - min(pattern) < 2 * pstdev(step_ms):
            return None  # a small ripple: the place explains the spread, but the spread is small
    elif groups is not None:
        fast, slow_ms, explained = groups
        if min(len(fast), len(slow_ms)) < max(MIN_SLOW, MIN_SHARE * n) or median(slow_ms) < SPREAD * median(fast) \
                or explained < BIMODAL:
            return None
        pattern = [median(fast), median(slow_ms)]
        threshold = min(slow_ms)
        slow = [i for i, x in enumerate(step_ms) if x >= threshold]
    else:
        return None
    share = len(slow) / n
    cause, why = _cause(step_ms, slow, phase_ms, workers, p, share)
    return Bursts(period=p, pattern_ms=pattern, slow_share=share, cause=cause, words=_words(pattern, p, share, why))


def _cause(step_ms, slow, phase_ms, workers, p, share) -> tuple[str | None, str]:
    """Which phase the slow steps spend their extra time in, from the per-step phase times: the
    data phase (loader workers, or the data pipeline), the optimizer (a scheduled step), or the
    model's own phases (a periodic host sync or log); unnamed without phase times."""
    every = p if p else max(2, round(1 / share)) if share > 0 else None
    if not phase_ms:
        return None, "the phases were not timed, so the cause is not named"
    slow_set = set(slow)
    extra = {}
    for name, ms in phase_ms.items():
        a = [x for i, x in enumerate(ms) if i in slow_set]
        b = [x for i, x in enumerate(ms) if i not in slow_set]
        if a and b:
            extra[name] = fmean(a) - fmean(b)
    gap = fmean([step_ms[i] for i in slow]) - fmean([x for i, x in enumerate(step_ms) if i not in slow_set]) \
        if 0 < len(slow) < len(step_ms) else 0.0
    if not extra or gap <= 0:
        return None, "no timed phase holds the slow steps' extra time"
    name = max(extra, key=extra.get)
    if extra[name] < 0.5 * gap:
        if set(extra) == {"data"}:  # only the fetch was timed apart
            return None, ("not the data fetch: work on some steps only (a host sync, a log, a scheduled step); "
                          "--phase-timing names the phase")
        return None, "no single timed phase holds most of the slow steps' extra time"
    if name == "data":
        if workers:
            at_once = f"{every} at a time" if every else "together"
            return "loader workers", (f"batches arrive {at_once}: the DataLoader's {workers} worker"
                                      f"{'s' if workers > 1 else ''} finish their batches together, and the "
                                      f"step waits for the next group")
        return "the data pipeline", "the slow steps wait for data (the data phase holds their extra time)"
    if name == "optimizer":
        return "a scheduled step", (f"the optimizer phase holds the extra time{f' every {every} steps' if p else ''}: "
                                    "a scheduled step (gradient accumulation, a scheduler or an EMA update)")
    return "a periodic host sync", (f"the {name} phase holds the extra time{f' every {p} steps' if p else ''}: a "
                                    "host sync, a log or a checkpoint that runs on some steps only")


def _words(pattern: list[float], p: int | None, share: float, why: str) -> str:
    ms = [f"{x:.3g}" for x in pattern]
    if p == 2:
        head = f"steps alternate {ms[0]} ms and {ms[1]} ms"
    elif p:
        head = f"steps repeat a cycle of {p}: {', '.join(ms)} ms"
    else:
        head = f"{share:.0%} of steps take about {ms[1]} ms, the rest about {ms[0]} ms"
    return f"{head}: {why}"
