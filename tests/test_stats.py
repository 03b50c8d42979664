import numpy as np
import pytest

from common import stats


def test_percentiles_match_numpy():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.5]
    for q in (0, 50, 95, 99, 100):
        assert stats.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_summary_reports_median_spread_and_throughput():
    s = stats.summarize([10.0, 10.0, 10.0, 50.0], batch_size=32)
    assert s["median_ms"] == 10.0  # the outlier does not move the median
    assert s["mean_ms"] == 20.0
    assert s["std_ms"] == pytest.approx(np.std([10, 10, 10, 50]))
    assert s["cv"] == pytest.approx(s["std_ms"] / 20.0)
    assert s["throughput_per_s"] == pytest.approx(32 / 0.010)  # samples/s at the median
    assert s["min_ms"] == 10.0 and s["max_ms"] == 50.0
    assert s["p95_ms"] == pytest.approx(np.percentile([10, 10, 10, 50], 95))
    assert stats.is_noisy(s)
    assert not stats.is_noisy(stats.summarize([10.0, 10.1, 9.9], 1))


def test_empty_sample_is_an_error():
    with pytest.raises(ValueError):
        stats.summarize([], 1)


def test_a_slower_fast_twin_is_said_in_words():
    from common.report import verdict

    assert verdict({"significant": True, "speedup": 0.8}) == "0.80x (the fast twin is SLOWER)"
    assert verdict({"significant": True, "speedup": 1.5}) == "1.50x"
    assert verdict({"significant": False, "speedup": 0.8}) == "no significant difference (0.80x)"
