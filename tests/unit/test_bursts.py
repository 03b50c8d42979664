"""A process's figure is its throughput over the timed stretch: steps that come in bursts (loader
workers' batches arriving together, a sync every N steps) are timed as the time they cost, at any step
count, and said as a finding. Each test here fails with the per-process median put back."""
import random

import pytest
import torch

from common.analysis import bursts, stats
from common.measure import stages
from common.measure.timing import StepTimer


def clocked(step_ms: list[float]) -> StepTimer:
    """The CPU step clock as the timed loop leaves it: steps that follow each other, these long."""
    timer, t = StepTimer(torch.device("cpu"), len(step_ms)), 100.0
    for i, ms in enumerate(step_ms):
        timer.starts[i], t = t, t + ms / 1000
        timer.ends[i] = t
    return timer


def process(pattern: list[float], n: int, rng: random.Random, noise: float = 0.02, offset: int = 0) -> float:
    """One process's figure: n steps of a repeating pattern (ms), each with a little noise, the whole
    process a little faster or slower than another (its placement, its clocks), the cycle entered at
    `offset` (where the loader's workers happened to be when the stretch began)."""
    speed = 1 + rng.gauss(0, noise)
    steps = [pattern[(i + offset) % len(pattern)] * speed * (1 + rng.gauss(0, noise)) for i in range(n)]
    return stages.figure(steps, clocked(steps), batch_size=1).summary.mean_ms


def speedup(slow: list[float], fast: list[float], n: int, processes: int = 7, seed: int = 0):
    rng = random.Random(seed)
    return stats.speedup([process(slow, n, rng, offset=rng.randrange(len(slow))) for _ in range(processes)],
                         [process(fast, n, rng, offset=rng.randrange(len(fast))) for _ in range(processes)])


@pytest.mark.parametrize("n", [24, 25, 26, 27, 100, 101])
@pytest.mark.parametrize("fast", [[16.0, 1.0, 1.0], [11.0, 1.0]])  # periods 3 and 2, both 6 ms on average
def test_twins_of_one_throughput_are_never_called_different_whatever_their_step_pattern(n, fast):
    s = speedup([6.0], fast, n)
    # the figures agree to their noise: never a difference beyond the floor (+-3%), which a median's 6x is
    assert s.ratio == pytest.approx(1.0, abs=stats.FLOOR) and s.low < 1 + stats.FLOOR and s.high > 1 - stats.FLOOR, s


@pytest.mark.parametrize("n", [24, 25, 26, 101])
def test_a_true_speedup_behind_bursty_steps_reads_within_its_interval_of_the_truth(n):
    s = speedup([6.0], [8.0, 1.0, 1.0], n)  # 6 ms against 3.33 ms: truly 1.8x
    assert s.verdict == "faster" and s.low <= 1.8 <= s.high and s.ratio == pytest.approx(1.8, rel=0.05), s


def test_the_figure_is_the_stretch_over_whole_periods():
    """25 steps that alternate 4 and 128 ms hold 13 of one and 12 of the other: the figure spans 24."""
    steps = [4.0, 128.0] * 12 + [4.0]
    fig = stages.figure(steps, clocked(steps), batch_size=16)
    assert fig.whole_steps == 24 and fig.summary.mean_ms == pytest.approx(66.0)
    assert fig.summary.throughput_per_s == pytest.approx(16 * 1000 / 66.0)
    assert fig.summary.median_ms == 4.0  # a single step's median stays what it is: one mode
    plain = [5.0, 5.2, 4.9, 5.1] * 5
    alike = stages.figure(plain, clocked(plain), batch_size=1)
    assert alike.whole_steps is None and alike.bursts is None


def test_the_stretch_includes_what_happens_between_steps():
    """The figure is the clock's, first start to last end: time outside the steps' own brackets counts."""
    timer = clocked([5.0] * 10)
    for i in range(10):  # each step starts 1 ms after the previous one ended
        timer.starts[i] += i * 0.001
        timer.ends[i] += i * 0.001
    assert timer.stretch_ms(10) == pytest.approx((9 * 6 + 5) / 10)


@pytest.mark.parametrize("steps, period", [([4.0, 128.0] * 12, 2), ([4.0, 128.0] * 12 + [4.0], 2),
                                           ([16.0, 1.0, 1.0] * 9, 3), ([16.0, 1.0, 1.0] * 9 + [16.0, 1.0], 3),
                                           ([30.0] + [1.0] * 7, None)])
def test_a_period_is_found_at_odd_and_even_counts(steps, period):
    rng = random.Random(1)
    noisy = [x * (1 + rng.gauss(0, 0.03)) for x in steps]
    assert bursts.period(noisy) == period


def test_noise_has_no_period_and_no_bursts():
    rng = random.Random(2)
    for _ in range(50):
        steps = [10 * (1 + rng.gauss(0, 0.05)) for _ in range(40)]
        assert bursts.period(steps) is None and bursts.find(steps) is None


def test_loader_workers_arriving_together_are_named_from_the_data_phase():
    steps = [4.0, 128.0] * 12
    phases = {"data": [0.5, 124.0] * 12, "forward": [2.0, 2.0] * 12, "backward": [1.5, 2.0] * 12}
    found = bursts.find(steps, phases, workers=2)
    assert found.period == 2 and found.cause == "loader workers"
    assert found.words.startswith("steps alternate 4 ms and 128 ms: batches arrive 2 at a time")


def test_a_sync_every_few_steps_is_named_from_the_phase_that_holds_it():
    steps = [20.0, 2.0, 2.0, 2.0] * 8
    phases = {"data": [0.1] * 32, "forward": [19.0, 1.0, 1.0, 1.0] * 8, "optimizer": [0.5] * 32}
    found = bursts.find(steps, phases)
    assert found.period == 4 and found.cause == "a periodic host sync"
    assert "the forward phase holds the extra time every 4 steps" in found.words
    rare = [2.0] * 30 + [40.0] * 4
    random.Random(3).shuffle(rare)
    modes = bursts.find(rare, {"optimizer": [x - 1.5 for x in rare], "forward": [1.5] * 34})
    assert modes.period is None and modes.cause == "a scheduled step"
    assert modes.words.startswith("12% of steps take about 40 ms, the rest about 2 ms")


def test_a_lone_pause_is_no_pattern():
    assert bursts.find([5.0] * 39 + [200.0]) is None


def test_the_timed_stretch_holds_whole_periods_of_the_warm_ups_pattern():
    warm = stages.WarmUp(steps=9, wall_s=1.0, first_step_s=0.5, step_s=0.066, period=2)
    assert stages.timed_steps(warm, 25, 0) == 26
    assert stages.timed_steps(stages.WarmUp(9, 1.0, 0.5, 0.066, period=3), 25, 0) == 27
    assert stages.timed_steps(stages.WarmUp(9, 1.0, 0.5, 0.066), 25, 0) == 25
    per_step, period = stages.pace([0.004, 0.128] * 4)
    assert period == 2 and per_step == pytest.approx(0.066)  # the mean over whole periods, not a mode


class Queued:
    """A stand-in for torch's multi-process iterator's queue: `levels` ready batches after each step."""

    def __init__(self, levels, workers=2, prefetch=2):
        self.levels, self._num_workers, self._prefetch_factor = list(levels), workers, prefetch


def test_settling_drains_a_full_queue_and_stops_at_its_steady_level(monkeypatch):
    monkeypatch.setattr(stages, "ready", lambda s: s.levels.pop(0) if isinstance(s, Queued) and s.levels else None)

    def run(settling):
        while settling.more():
            settling.stepped()
        return settling.steps

    # a loader that cannot keep up: down to a batch per worker (2), its steady level
    assert run(stages.Settling(Queued([8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]))) == 6
    # one that keeps up keeps its queue full: that is its level, said by 8 steps without a new low
    assert run(stages.Settling(Queued([8] * 30))) == 8
    # one that drains slowly (workers nearly as fast as the step) is followed while it falls, for SETTLE_S at most
    slow = [16 - i // 3 for i in range(60)]
    assert run(stages.Settling(Queued(slow, workers=2, prefetch=8))) == 42
    clock = iter(range(0, 1000))
    timed_out = stages.Settling(Queued(slow, workers=2, prefetch=8), clock=lambda: next(clock))
    assert run(timed_out) == stages.SETTLE_S - 1  # a second a step here: the 10th would begin at 10 s
    assert not stages.Settling(iter([1, 2, 3])).more()  # a stream that queues nothing: no settling


def test_a_queue_that_drained_over_the_stretch_is_said():
    assert stages.drained(60, 0, 100).startswith("the DataLoader's queue held 60 ready batches when the timed")
    assert "up to 60% of its 100 steps" in stages.drained(60, 0, 100)
    assert stages.drained(8, 7, 100) is None and stages.drained(None, 0, 100) is None


def test_ready_counts_a_real_loaders_delivered_batches():
    loader = torch.utils.data.DataLoader(list(range(64)), batch_size=4, num_workers=2, prefetch_factor=2)
    it = iter(loader)
    next(it)
    import time

    time.sleep(1.0)  # the workers fill the queue while the step "computes"
    assert 1 <= stages.ready(it) <= 4  # 2 workers x 2 prefetched, less the one handed out
    it._shutdown_workers()
    assert stages.ready(iter([1, 2])) is None


def test_without_the_phase_timer_the_fetch_alone_tells_a_data_bound_burst_apart():
    steps = [13.0, 29.0, 13.0] * 8
    fetch = {"data": [1.0, 17.0, 1.0] * 8}
    assert bursts.find(steps, fetch).cause == "the data pipeline"
    other = bursts.find(steps, {"data": [1.0] * 24})
    assert other.cause is None and "not the data fetch" in other.words and "--phase-timing" in other.words


def test_unimodal_jitter_and_two_outliers_are_no_bursts():
    """A review found a log-normal step spread (sigma 0.5) called two modes in 20 of 50 samples."""
    rng = random.Random(4)
    for sigma in (0.3, 0.5):
        called = sum(bursts.find([10 * rng.lognormvariate(0, sigma) for _ in range(60)]) is not None
                     for _ in range(50))
        assert called <= 2, (sigma, called)
    assert bursts.find([50.0] * 28 + [145.0, 150.0]) is None  # two slow steps in 30
