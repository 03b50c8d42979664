"""Compile's cold start: what a pair costs before its steps pay, from its processes' results.

Each process gives two figures besides its steps: its time to first step (from the process's start
to the end of its first step, the timeline's "first step": interpreter, imports, data, model, and
compilation on that step) and its one-time cost (the warm-up's wall time less its steps at the
process's steady pace: compilation, autotuning, a CUDA graph's recording, run.setup()'s work).
The break-even is where the twins' cumulative times cross: the one-time costs' difference over the
steps' difference. Its interval takes each end from the two differences' intervals over processes,
each at half the error (Bonferroni), so the pair of them holds at the page's level."""
from statistics import fmean

from common.analysis import stats
from common.analysis.results_compare import BreakEven, ColdStart
from common.analysis.results_run import RunResult, Timing

# the ways two twins' cumulative times can cross, from the signs of the one-time cost's difference
# (fast less slow: + when compiling costs the fast twin more) and the step saving (slow less fast)
CASES = {(1, 1): "pays after", (1, 0): "pays after", (0, 1): "pays after",
         (1, -1): "never pays", (0, -1): "never pays",
         (-1, 1): "ahead throughout", (-1, 0): "ahead throughout",
         (-1, -1): "ahead until", (0, 0): "undecided"}


def first_step_s(r: RunResult) -> float | None:
    """Seconds from the process's start to the end of its first step (None: no warm-up step ran), less a
    pipelined process's wait at its gate (common.measure.gate): the process before it ran meanwhile."""
    marks = r.timeline or {}
    first = marks.get("first step")
    if first is None:
        return None
    return first - (marks["gate"] - marks["ready"] if "gate" in marks and "ready" in marks else 0.0)


def one_time_s(t: Timing) -> float:
    """The warm-up's wall time beyond its steps at the steady pace (the timed stretch's mean step)."""
    return max(0.0, t.warmup_s - t.warmup_steps * t.summary.mean_ms / 1000)


def compiled(runs: list[RunResult]) -> bool:
    return any(r.compile and r.compile.graphs for r in runs)


def measured(runs: list[RunResult], measure: str) -> list[float]:
    """Each process's figure for the headline: its ms per step (the timed stretch over its steps) or
    its time to first step (s)."""
    if measure == "first step":
        return [s for s in (first_step_s(r) for r in runs) if s is not None]
    return [r.timing.summary.mean_ms for r in runs]


def _sign(interval, point) -> int:
    """+1 or -1 where the interval excludes 0 (or, without one, the point's sign); 0 where it does not."""
    low, high = interval if interval else (point, point)
    return 1 if low > 0 else -1 if high < 0 else 0


def break_even(slow_one_time, fast_one_time, slow_ms, fast_ms, run_steps=None, level=0.95) -> BreakEven:
    """The steps after which the twins' cumulative times cross (BreakEven's case says which way);
    one-time costs in s and step medians in ms, one per process."""
    extra = fmean(fast_one_time) - fmean(slow_one_time)
    saved = (fmean(slow_ms) - fmean(fast_ms)) / 1000
    each = 1 - (1 - level) / 2  # two intervals, each at half the error
    d = stats.difference_interval(fast_one_time, slow_one_time, each)
    s = stats.difference_interval(slow_ms, fast_ms, each)
    s = (s[0] / 1000, s[1] / 1000) if s else None
    case = CASES[(_sign(d, extra), _sign(s, saved))]
    point = extra / saved if saved and extra / saved > 0 and case in ("pays after", "ahead until") else None
    low = high = None
    if d and s and case == "pays after":
        low = max(d[0], 0.0) / s[1] if s[1] > 0 else None
        high = d[1] / s[0] if s[0] > 0 else None  # the saving's interval reaches 0: no upper end
    elif d and s and case == "ahead until":
        low, high = d[1] / s[0], d[0] / s[1]
    return BreakEven(case=case, steps=point, low=low, high=high, extra_s=extra, saved_ms=saved * 1000,
                     run_steps=run_steps)


def cold_start(slow: list[RunResult], fast: list[RunResult], looks: int = 1, fresh: bool = True,
               cache: dict | None = None) -> ColdStart | None:
    """A pair's cold start where either twin compiled (None where neither did, or a twin has no
    measured process)."""
    ok = lambda runs: [r for r in runs if r.status == "ok" and r.timing]  # noqa: E731
    slow, fast = ok(slow), ok(fast)
    if not slow or not fast or not (compiled(slow) or compiled(fast)):
        return None
    sf, ff = measured(slow, "first step"), measured(fast, "first step")
    first = stats.speedup(sf, ff, looks=looks) if sf and ff else None
    run_steps = fast[0].timing.warmup_steps + fast[0].timing.summary.n
    return ColdStart(slow_first_s=sf, fast_first_s=ff, first=first,
                     slow_one_time_s=[one_time_s(r.timing) for r in slow],
                     fast_one_time_s=[one_time_s(r.timing) for r in fast],
                     break_even=break_even([one_time_s(r.timing) for r in slow], [one_time_s(r.timing) for r in fast],
                                           measured(slow, "step"), measured(fast, "step"), run_steps,
                                           stats.sequential_level(looks)),
                     fresh=fresh, cache=cache)


def steps_text(n: float) -> str:
    return f"{n:,.0f}" if n >= 10 else f"{n:.1f}"


def interval_text(b: BreakEven) -> str:
    if b.low is None and b.high is None:
        return "no interval: at least 2 processes each are needed"
    if b.high is None:
        return f"95% interval from {steps_text(b.low)} steps up: the step saving's interval reaches 0"
    return f"95% interval {steps_text(b.low or 0)}-{steps_text(b.high)}"


def words(b: BreakEven, fast: str = "the fast twin", slow: str = "the slow twin",
          run: str = "a run of {n} steps like this one") -> str:
    """The break-even in one sentence, with the run's step count against it (`run`, formatted with n)."""
    if b.case == "pays after" and b.steps is not None:
        out = (f"{fast}'s extra {b.extra_s:.2f} s of one-time work is repaid by its {b.saved_ms:.3g} ms faster "
               f"steps after {steps_text(b.steps)} steps ({interval_text(b)})")
        if b.run_steps is not None and b.low is not None and b.run_steps < b.low:
            out += f"; {run.format(n=b.run_steps)} is shorter: compiling costs more than it saves here"
        elif b.run_steps is not None and b.high is not None and b.run_steps > b.high:
            out += f"; {run.format(n=b.run_steps)} is longer: compiling pays"
        elif b.run_steps is not None:
            out += f"; {run.format(n=b.run_steps)} lies within that interval"
        return out
    if b.case == "pays after" and b.extra_s > 0:  # more one-time work; steps not measurably faster, nor slower
        return (f"{fast} has {b.extra_s:.2f} s more one-time work and steps that do not differ measurably "
                f"({-b.saved_ms:+.3g} ms): no break-even at these processes (compiling this way costs more than it "
                "saves here)")
    if b.case == "pays after":  # faster steps; one-time work that does not differ measurably
        return (f"{fast} runs {b.saved_ms:.3g} ms faster steps and its one-time work does not differ measurably "
                f"({b.extra_s:+.2f} s): it is likely ahead throughout")
    if b.case == "ahead until" and b.steps is not None:
        return (f"{fast} starts with {-b.extra_s:.2f} s less one-time work and runs {-b.saved_ms:.3g} ms slower "
                f"steps: it stays ahead for {steps_text(b.steps)} steps ({interval_text(b)}), after which "
                f"{slow}'s faster steps have caught up")
    return {"ahead throughout": f"{fast} is ahead from the first step: {-b.extra_s:.2f} s less one-time work, and "
                                "steps not measurably slower",
            "never pays": f"{fast} never catches up: its steps are not faster, so its one-time work is never repaid "
                          "(compiling costs more than it saves here)",
            }.get(b.case, "no break-even can be said: neither the one-time costs nor the steps differ measurably "
                          "over these processes")


def seconds(values: list[float]) -> str:
    """A twin's time to first step over its processes: the median, and the range where there are several."""
    from statistics import median

    if not values:
        return "n/a"
    return f"{median(values):.2f} s" + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")
