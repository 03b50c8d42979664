"""Statistics: step times within a process, and speedups over processes.

A process's figure is its throughput over the timed stretch: the stretch's wall time over its steps
(the mean step), the stretch holding whole periods of whatever repeats in it. Not the median step: a
pipeline that delivers in bursts (two loader workers' batches arriving together: steps of 4 and
128 ms in turn) puts the median on one mode or between them, which one depending on the step count,
while the mean is the time a step costs (Kalibera and Jones take the mean of a process's
iterations; pyperf and nvbench report means of repeated loops; docs/measurement.md derives it).
Within a process, steps are not independent samples (they share a placement, clocks, a heap, a
compiled graph), so the median, p95, p99 and CV describe that process's single steps only. The
process is the unit of replication (pyperf's worker processes; Kalibera and Jones, "Rigorous
Benchmarking in Reasonable Time", 2013: variance lives at the level of invocations). A variant's
figure is the median of its per-process figures; a speedup is the ratio of two such figures with a
95% interval over processes.

The interval is a Welch t-interval on the log of the per-process figures (log, because a speedup
is a ratio and run-to-run noise is multiplicative). With the 3-10 processes a comparison affords,
a bootstrap over processes cannot be trusted: resampling 3 values gives at most 10 distinct
medians, and its percentile interval never reaches beyond the observed extremes, so it is too
narrow exactly when there is least data (tests/unit/test_stats.py measures both).
"""
import math
from statistics import fmean, median, pstdev, stdev

from common.analysis.results_compare import MEAN, MEDIAN, Speedup
from common.analysis.results_run import Summary

NOISY_CV = 0.10  # a coefficient of variation above 10% makes a measurement "noisy"
FLOOR = 0.03  # an interval inside +-3% is "no meaningful difference"
METHOD = "Welch t-interval on log per-process mean steps (the timed stretch over its steps), 95%"
STATISTIC_WORDS = {MEAN: "the timed stretch's wall time over its steps (the mean step)",
                   MEDIAN: "the median step (results written before the mean step was the figure)"}
# Looking at the interval after every added process and stopping when it decides ("optional
# stopping") claims false differences far more often than 5%: with a plain 95% interval and looks
# at 3..10 processes, 14% of identical twins were called different in tests/unit/test_stats.py's
# simulation. Each look therefore uses Pocock's nominal level for that many looks (two-sided 5%
# overall; Pocock 1977, Table 1), which brings the whole procedure back to about 5%.
POCOCK_ALPHA = {1: 0.05, 2: 0.0294, 3: 0.0221, 4: 0.0182, 5: 0.0158, 6: 0.0142, 7: 0.0130, 8: 0.0120, 9: 0.0112,
                10: 0.0106}


def sequential_level(looks: int) -> float:
    """The interval level of each look so that `looks` looks together claim a false difference 5% of the time."""
    return 1 - POCOCK_ALPHA[min(max(looks, 1), max(POCOCK_ALPHA))]


def percentile(samples, q):
    """Linear-interpolated percentile (the same rule as numpy's default), q in [0, 100]."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("percentile of an empty sample")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(step_ms, batch_size, stretch_ms: float | None = None) -> Summary:
    """Statistics of per-step times in milliseconds; the figure (`mean_ms`) and the throughput in
    samples/s are the stretch's: `stretch_ms`, its wall time over its steps, where the clock gave it,
    else the steps' mean (the same for steps that follow each other)."""
    if not step_ms:
        raise ValueError("no timed steps to summarize")
    med, mean = median(step_ms), stretch_ms if stretch_ms else fmean(step_ms)
    std = pstdev(step_ms) if len(step_ms) > 1 else 0.0
    return Summary(n=len(step_ms), median_ms=med, mean_ms=mean, std_ms=std, cv=std / mean if mean > 0 else 0.0,
                   p95_ms=percentile(step_ms, 95), p99_ms=percentile(step_ms, 99), min_ms=min(step_ms),
                   max_ms=max(step_ms), throughput_per_s=batch_size * 1000.0 / mean if mean > 0 else 0.0)


def is_noisy(cv: float | None) -> bool:
    return cv is not None and cv > NOISY_CV


def cv(values) -> float | None:
    """Sample coefficient of variation; None for fewer than two values."""
    if len(values) < 2:
        return None
    m = fmean(values)
    return stdev(values) / m if m > 0 else None


def t_quantile(p: float, df: float) -> float:
    from scipy.stats import t  # scipy comes with scikit-learn

    return float(t.ppf(p, df))


def log_ratio_interval(slow, fast, level=0.95):
    """Welch t-interval for exp(mean log slow - mean log fast); None with fewer than 2 per side."""
    if len(slow) < 2 or len(fast) < 2:
        return None
    ls, lf = [math.log(x) for x in slow], [math.log(x) for x in fast]
    vs, vf = stdev(ls) ** 2 / len(ls), stdev(lf) ** 2 / len(lf)
    diff = fmean(ls) - fmean(lf)
    se = math.sqrt(vs + vf)
    if se == 0:
        return math.exp(diff), math.exp(diff)
    df = (vs + vf) ** 2 / (vs ** 2 / (len(ls) - 1) + vf ** 2 / (len(lf) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return math.exp(diff - half), math.exp(diff + half)


def difference_interval(a, b, level=0.95):
    """Welch t-interval for mean(a) - mean(b), on the values themselves (a difference of seconds, where
    log_ratio_interval's ratio is not the question); None with fewer than 2 per side."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff = fmean(a) - fmean(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return diff - half, diff + half


def level_interval(values, level=0.95):
    """t-interval of the geometric mean of per-process figures (a rung's throughput, say); None for
    fewer than two."""
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    half = t_quantile(0.5 + level / 2, len(logs) - 1) * stdev(logs) / math.sqrt(len(logs))
    return math.exp(fmean(logs) - half), math.exp(fmean(logs) + half)


def bootstrap_interval(slow, fast, resamples=10_000, level=0.95, seed=0):
    """Percentile bootstrap over processes of median(slow) / median(fast). Kept to show, in the
    tests, why it is not the method: with few processes it is too narrow."""
    import random

    rng = random.Random(seed)
    ratios = sorted(median(rng.choices(slow, k=len(slow))) / median(rng.choices(fast, k=len(fast)))
                    for _ in range(resamples))
    return ratios[int((1 - level) / 2 * resamples)], ratios[int((1 + level) / 2 * resamples) - 1]


def verdict(low, high, floor=FLOOR) -> str:
    if low is None:
        return "undecided"
    if low > 1:
        return "faster"
    if high < 1:
        return "slower"
    if low >= 1 - floor and high <= 1 / (1 - floor):
        return "no meaningful difference"
    return "undecided"


def speedup(slow_ms, fast_ms, floor=FLOOR, looks=1, method=METHOD) -> Speedup:
    """The speedup of fast over slow from per-process figures (ms per step), with its interval and verdict:
    "faster"/"slower" only when the interval excludes 1; "no meaningful difference" when it lies
    within +-floor; else "undecided" (more processes would narrow it). `looks`: how many times the
    runner may look at the interval (sequential_level)."""
    ratio = median(slow_ms) / median(fast_ms)
    level = sequential_level(looks)
    interval = log_ratio_interval(slow_ms, fast_ms, level)
    low, high = interval if interval else (None, None)
    return Speedup(ratio=ratio, low=low, high=high, method=method, processes=[len(slow_ms), len(fast_ms)],
                   verdict=verdict(low, high, floor), floor=floor, level=level, looks=looks)


def decided(s: Speedup) -> bool:
    return s.verdict in ("faster", "slower", "no meaningful difference")


# a verdict as a page says it: "undecided" is what the reader sees as "no significant difference"
WORDS = {"faster": "faster", "slower": "slower", "no meaningful difference": "no meaningful difference",
         "undecided": "no significant difference"}


def _processes(s: Speedup) -> str:
    n = s.processes
    if not n:
        return "processes not recorded"
    return (f"{n[0]} process{'es' if n[0] > 1 else ''} each" if n[0] == n[1]
            else f"{n[0]} slow and {n[1]} fast processes")


# an interval whose ends lie more than 50x apart says nothing as a number (two processes each on a
# loaded machine gave 0.00-2.6e28): wide intervals from few processes stay numbers (2.25-40.52, 18x)
NOISY_SPAN = 50.0
NOISY_ADVICE = "an idle machine, fewer threads (--cpus), or more rounds"


def too_noisy(s: Speedup) -> bool:
    """The processes disagree beyond what their count can resolve: the interval spans more than
    NOISY_SPAN, which is said in words, never printed as a number."""
    return s.low is not None and s.high > NOISY_SPAN * max(s.low, 1e-12)


def verdict_words(s: Speedup) -> str:
    """The verdict in the one vocabulary every cell, verdict column, bullet and terminal line uses:
    faster, slower, no meaningful difference, no significant difference, too noisy to decide, or no
    interval; describe(s) opens with the same words."""
    if s.low is None:
        return "no interval"
    if s.verdict == "undecided" and too_noisy(s):
        return "too noisy to decide"
    return WORDS[s.verdict]


def describe(s: Speedup, who: str | None = None) -> str:
    """The plain sentence every page says a speedup with (a report's section opens with it):
    'fast is 1.15x faster (95% interval 1.01-1.39, 5 processes each)', 'no significant difference:
    1.03x (95% interval 0.92-1.08, ...)'. `who`: the subject ('fast', a fix); None in a table's cell.
    How the interval was computed is footnote(s)'s, said once per page."""
    if s.low is None:
        return f"{s.ratio:.2f}x, no interval ({_processes(s)}; at least 2 each are needed)"
    if too_noisy(s):
        subject = f"{who} is " if who else ""
        unresolved = f"the other end unresolved at this noise, {_processes(s)}; try {NOISY_ADVICE}"
        if s.verdict == "faster":
            return f"{subject}{s.ratio:.2f}x faster (95% interval from {s.low:.2f}x up; {unresolved})"
        if s.verdict == "slower":
            return f"{subject}SLOWER: {s.ratio:.2f}x (95% interval up to {s.high:.2f}x; {unresolved})"
        return (f"too noisy to decide: the processes' times disagree beyond what {_processes(s)} can resolve "
                f"(try {NOISY_ADVICE})")  # no ratio: a number there would read as a result
    interval = f"95% interval {s.low:.2f}-{s.high:.2f}" + (f", {_processes(s)}" if s.processes else "")
    subject = f"{who} is " if who else ""
    return {"faster": f"{subject}{s.ratio:.2f}x faster ({interval})",
            "slower": f"{subject}SLOWER: {s.ratio:.2f}x ({interval})",
            "no meaningful difference": f"no meaningful difference: {s.ratio:.2f}x ({interval}), "
                                        f"within +-{s.floor:.0%}",
            "undecided": f"{WORDS['undecided']}: {s.ratio:.2f}x ({interval})"}[s.verdict]


def footnote(looks: int = 1, floor: float = FLOOR, statistic: str = MEAN, figure: str | None = None) -> str:
    """How every interval on a page was computed, said once: the page's footnote. `figure`: what each
    process's figure is where it is not a step's time (serving's SLA rate)."""
    level = sequential_level(looks)
    sequential = ("" if looks <= 1 else
                  f" The runner looks at the interval after each round, up to {looks} times, and stops once it "
                  f"decides; each look is therefore taken at {level:.1%} (Pocock), so that all looks together "
                  f"call a false difference at most 5% of the time.")
    return (f"The 95% interval is over processes, the unit of replication (steps inside one process are not "
            f"independent samples): a Welch t-interval on the logarithms of the per-process figures, each "
            f"{figure or STATISTIC_WORDS[statistic]}."
            f"{sequential} \"Faster\" or \"slower\" only when the interval excludes 1; \"no meaningful "
            f"difference\" when it lies within +-{floor:.0%}; otherwise \"no significant difference\" (more "
            f"processes would narrow it).")
