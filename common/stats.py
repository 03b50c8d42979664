"""Step-time statistics: the median first, with its spread, never the mean alone."""
import math
from statistics import fmean, median, pstdev

NOISY_CV = 0.10  # a coefficient of variation above 10% makes a measurement "noisy"


def percentile(samples, q):
    """Linear-interpolated percentile (the same rule as numpy's default), q in [0, 100]."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("percentile of an empty sample")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(step_ms, batch_size):
    """Statistics of per-step times in milliseconds, plus throughput in samples/s at the median."""
    if not step_ms:
        raise ValueError("no timed steps to summarize")
    med = median(step_ms)
    mean = fmean(step_ms)
    std = pstdev(step_ms) if len(step_ms) > 1 else 0.0
    return {
        "n": len(step_ms),
        "median_ms": med,
        "mean_ms": mean,
        "std_ms": std,
        "cv": std / mean if mean > 0 else 0.0,
        "p95_ms": percentile(step_ms, 95),
        "p99_ms": percentile(step_ms, 99),
        "min_ms": min(step_ms),
        "max_ms": max(step_ms),
        "throughput_per_s": batch_size * 1000.0 / med if med > 0 else 0.0,
    }


def is_noisy(summary):
    return summary["cv"] > NOISY_CV


def median_ci(samples, z=1.96):
    """Distribution-free ~95% confidence interval of the median: the order statistics at
    n/2 -+ z*sqrt(n)/2 (binomial, normal approximation). Wide for small samples, as it should be."""
    xs = sorted(samples)
    n = len(xs)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return xs[lo], xs[hi]


def compare_medians(slow_ms, fast_ms):
    """Speedup of the medians, and whether it is a difference at all: when the medians' 95%
    intervals overlap, the report says "no significant difference" instead of a speedup."""
    s_lo, s_hi = median_ci(slow_ms)
    f_lo, f_hi = median_ci(fast_ms)
    return {
        "speedup": median(slow_ms) / median(fast_ms),
        "slow_median_ci_ms": [s_lo, s_hi],
        "fast_median_ci_ms": [f_lo, f_hi],
        "significant": f_hi < s_lo or s_hi < f_lo,
    }
