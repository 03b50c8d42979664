"""Statistics: step summaries within a process, speedups with intervals over processes."""
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from common.analysis import stats

H100 = Path(__file__).parent.parent / "data" / "h100-2026-11-22"


def test_percentiles_match_numpy():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.5]
    for q in (0, 50, 95, 99, 100):
        assert stats.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_summary_reports_median_spread_and_throughput():
    s = stats.summarize([10.0, 10.0, 10.0, 50.0], batch_size=32)
    assert s.median_ms == 10.0  # the outlier does not move the median
    assert s.mean_ms == 20.0
    assert s.std_ms == pytest.approx(np.std([10, 10, 10, 50]))
    assert s.cv == pytest.approx(s.std_ms / 20.0)
    assert s.throughput_per_s == pytest.approx(32 / 0.020)  # samples/s at the mean step: what the steps cost
    stretch = stats.summarize([10.0, 10.0, 10.0, 50.0], batch_size=32, stretch_ms=21.0)  # the clock's, gaps included
    assert stretch.mean_ms == 21.0 and stretch.throughput_per_s == pytest.approx(32 / 0.021)
    assert s.min_ms == 10.0 and s.max_ms == 50.0
    assert s.p95_ms == pytest.approx(np.percentile([10, 10, 10, 50], 95))
    assert stats.is_noisy(s.cv)
    assert not stats.is_noisy(stats.summarize([10.0, 10.1, 9.9], 1).cv)
    assert not stats.is_noisy(None)


def test_empty_sample_is_an_error():
    with pytest.raises(ValueError):
        stats.summarize([], 1)


def test_two_rounds_give_a_true_median_not_the_maximum():
    """Not sorted(x)[len(x) // 2], which with two processes is the larger one."""
    s = stats.speedup([10.0, 14.0], [5.0, 7.0])
    assert s.ratio == pytest.approx(12.0 / 6.0)
    from common.analysis.aggregate import aggregate

    from tests_helpers import run_result

    agg = aggregate([run_result(ms=10.0), run_result(ms=14.0)])
    assert agg.step_ms == pytest.approx(12.0)


def test_the_words_follow_the_interval():
    assert stats.verdict(1.1, 1.3) == "faster"
    assert stats.verdict(0.7, 0.9) == "slower"
    assert stats.verdict(0.98, 1.02) == "no meaningful difference"
    assert stats.verdict(0.9, 1.2) == "undecided"
    assert stats.verdict(None, None) == "undecided"
    text = stats.describe(stats.speedup([10.0, 10.2, 9.9, 10.1, 10.0], [5.0, 5.1, 4.9, 5.05, 5.0]), "fast")
    assert text == "fast is 2.00x faster (95% interval 1.97-2.04, 5 processes each)"
    slower = stats.describe(stats.speedup([5.0, 5.1, 4.9], [10.0, 10.2, 9.9]), "fast")
    assert slower.startswith("fast is SLOWER: 0.50x (95% interval 0.4")
    same = stats.describe(stats.speedup([10.0, 10.1, 9.9, 10.0], [10.0, 10.05, 9.95, 10.0]))
    assert same.startswith("no meaningful difference: 1.00x (95% interval 0.9") and same.endswith("within +-3%")
    unsure = stats.describe(stats.speedup([10.0, 12.0, 8.0], [10.0, 11.0, 9.0]), "fast")
    assert unsure.startswith("no significant difference: 1.00x (95% interval 0.")  # no subject: no claim about it
    one = stats.describe(stats.speedup([10.0], [5.0]))
    assert "no interval" in one and "1 process each" in one


def test_the_footnote_says_how_every_interval_on_a_page_was_computed():
    once = stats.footnote(1)
    assert "Welch t-interval on the logarithms of the per-process figures, each the timed stretch's wall time " \
           "over its steps (the mean step)" in once and "Pocock" not in once
    assert "each the median step (results written before" in stats.footnote(1, statistic=stats.MEDIAN)
    looked = stats.footnote(8)
    assert "up to 8 times" in looked and "98.8% (Pocock)" in looked and "within +-3%" in looked


def _simulate(true_ratio, between_cv, trials, seed, least=3, most=10):
    """The runner's procedure (common.runners.compare.run_workload) on simulated processes: per-process
    medians with lognormal noise between processes, like the H100 host's; a look after every round
    from `least` on; stop when the interval decides, or at `most`."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1 + between_cv ** 2))
    looks = most - least + 1
    verdicts = []
    for _ in range(trials):
        slow, fast = [], []
        for n in range(1, most + 1):
            slow.append(10.0 * math.exp(rng.gauss(0, sigma)))
            fast.append(10.0 / true_ratio * math.exp(rng.gauss(0, sigma)))
            if n < least:
                continue
            s = stats.speedup(slow, fast, looks=looks)
            if stats.decided(s) or n == most:
                verdicts.append(s.verdict)
                break
    return verdicts


def test_identical_twins_are_rarely_called_different_even_when_the_runner_keeps_looking():
    """Looking after every round with a plain 95% interval claims 14% false differences; with
    Pocock's per-look level the whole procedure stays near 5%."""
    for cv in (0.01, 0.05, 0.25):
        verdicts = _simulate(1.0, cv, 1500, seed=1)
        claimed = sum(v in ("faster", "slower") for v in verdicts) / len(verdicts)
        assert claimed <= 0.065, (cv, claimed)
    quiet = _simulate(1.0, 0.01, 500, seed=4)  # quiet processes: the floor is reached, "no meaningful difference"
    assert sum(v == "no meaningful difference" for v in quiet) / len(quiet) >= 0.9


def test_a_true_2x_is_called_even_with_noisy_processes():
    for cv in (0.02, 0.10, 0.30):
        verdicts = _simulate(2.0, cv, 500, seed=2)
        assert sum(v == "faster" for v in verdicts) / len(verdicts) >= 0.95, cv


def test_more_looks_mean_a_wider_interval_per_look():
    assert stats.sequential_level(1) == 0.95
    assert 0.985 < stats.sequential_level(8) < stats.sequential_level(10) < 0.99
    once = stats.speedup([10, 11, 10.5], [8, 8.5, 8.2])
    often = stats.speedup([10, 11, 10.5], [8, 8.5, 8.2], looks=8)
    assert often.low < once.low and often.high > once.high and f"{often.level:.1%} (Pocock)" in stats.footnote(8)


def test_the_t_interval_covers_where_the_bootstrap_does_not():
    """Why the t-interval: with 3 processes each the percentile bootstrap over processes is too
    narrow (it cannot reach past the observed extremes) and claims differences between identical
    twins far more often than 5%."""
    rng = random.Random(3)
    t_claims = boot_claims = 0
    trials = 400
    for _ in range(trials):
        slow = [10 * math.exp(rng.gauss(0, 0.1)) for _ in range(3)]
        fast = [10 * math.exp(rng.gauss(0, 0.1)) for _ in range(3)]
        lo, hi = stats.log_ratio_interval(slow, fast)
        t_claims += not (lo <= 1 <= hi)
        lo, hi = stats.bootstrap_interval(slow, fast, resamples=2000)
        boot_claims += not (lo <= 1 <= hi)
    assert t_claims / trials <= 0.07 and boot_claims >= 2 * t_claims, (t_claims, boot_claims)


def old_medians(recipe, workload):
    """Per-process medians from the first H100 run's result files (schema 1, plain dicts)."""
    c = json.loads((H100 / f"{recipe}.comparison.json").read_text())
    assert c["schema_version"] == 1
    entry = c["workloads"][workload]
    return entry["slow"]["round_medians_ms"], entry["fast"]["round_medians_ms"]


def test_the_h100_amp_churn_twins_are_not_called_different():
    """The report called them '0.83x, SLOWER' from pooled steps; over processes it cannot be said."""
    s = stats.speedup(*old_medians("amp", "churn"))
    assert s.verdict == "undecided" and s.low < 1 < s.high


def test_the_h100_fused_ops_resnet18_speedup_is_significant():
    s = stats.speedup(*old_medians("fused_ops", "resnet18"))
    assert s.verdict == "faster" and s.low > 1 and 1.3 < s.ratio < 1.8


@pytest.mark.parametrize("recipe, workload, verdict", [
    ("amp", "resnet18", "faster"), ("dataloader", "resnet18", "faster"), ("checkpointing", "churn", "slower")])
def test_other_clear_h100_results_stay_clear(recipe, workload, verdict):
    assert stats.speedup(*old_medians(recipe, workload)).verdict == verdict
