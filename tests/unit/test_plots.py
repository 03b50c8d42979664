"""Every plot a person reads at a glance: rendered from saved and hand-made typed results, then
checked with matplotlib's own layout: no text outside the figure, no two texts on top of each other,
speedups on a log axis labelled in x, and the sweep's knob as its plain values."""
import json
from pathlib import Path

import pytest

import ladder as ladder_specs
from common.analysis import aggregate, stats
from common.analysis.results_compare import Comparison, WorkloadComparison
from common.analysis.results_diagnose import Baseline, Bottleneck, Component, Diagnosis, DiagnosisOps
from common.analysis.results_run import KindRow, Memory
from common.render import diagnosis as render_diagnosis
from common.render import index, report
from common.render import ladder as render_ladder
from common.render import sweep as render_sweep
from common.runners import climb, sweep

from tests_helpers import run_result

H100 = Path(__file__).parent.parent / "data" / "h100-2026-11-22"


# --- typed results -------------------------------------------------------------------------------

def _runs(medians, variant, device, batch_size=32, peak_mb=100.0):
    out = []
    for m in medians:
        r = run_result(ms=m, variant=variant, device=device, batch_size=batch_size)
        r.memory = Memory(kind="cuda_allocator" if device == "cuda" else "cpu_peak_rss", peak_mb=peak_mb)
        out.append(r)
    return out


def _entry(slow_medians, fast_medians, device="cuda", batch_size=32, slow_mb=100.0, fast_mb=100.0, looks=1):
    slow = _runs(slow_medians, "slow", device, batch_size, slow_mb)
    fast = _runs(fast_medians, "fast", device, batch_size, fast_mb)
    entry = WorkloadComparison(slow=aggregate.aggregate(slow), fast=aggregate.aggregate(fast))
    entry.speedup = stats.speedup(entry.slow.process_ms, entry.fast.process_ms, looks=looks)
    entry.parity = aggregate.parity(slow[0], fast[0], {"early_steps": 5, "early_rtol": 0.01, "window": 10,
                                                         "rtol": 0.05})
    return entry


def _comparison(recipe, workloads, device="cuda") -> Comparison:
    return Comparison(recipe=recipe, title=recipe, evidence_keys=["peak_mb"], smoke=False, device=device,
                      command="x", results_dir="r", workloads=workloads, failures=[])


def saved_comparison(recipe) -> Comparison:
    """The first H100 run's per-process medians and peaks (tests/data, the old schema) as typed results."""
    saved = json.loads((H100 / f"{recipe}.comparison.json").read_text())
    workloads = {}
    for w, e in saved["workloads"].items():
        workloads[w] = _entry(e["slow"]["round_medians_ms"], e["fast"]["round_medians_ms"], "cuda",
                              e["slow"]["config"]["batch_size"], e["slow"]["memory"]["max_allocated_mb"],
                              e["fast"]["memory"]["max_allocated_mb"])
    return _comparison(recipe, workloads)


def cpu_comparison() -> Comparison:
    """A CPU run that stopped at three processes per twin after three looks: the longest verdicts
    (a sequential interval), and a wide one."""
    return _comparison("amp", {"churn": _entry([2.8, 2.3, 2.5], [3.0, 2.2, 2.6], "cpu", slow_mb=310, fast_mb=312,
                                               looks=3),
                               "resnet18": _entry([41.0, 60.0, 52.0], [30.0, 33.0, 31.0], "cpu", 8, 900, 905,
                                                  looks=3)}, "cpu")


def sweep_result(knob="batch size", values=(2, 4, 8, 16, 32)) -> sweep.SweepResult:
    """Two processes per point, as a CPU sweep runs: one interval reaches far beyond the rest."""
    pairs = [([10.0, 30.0], [9.0, 12.0]), ([10.0, 10.4], [5.0, 5.1]), ([10.0, 10.2], [10.1, 10.0]),
             ([10.0, 10.1], [13.0, 13.3]), ([20.0, 90.0], [4.0, 4.1])]
    points = []
    for value, (slow, fast) in zip(values, pairs):
        p = sweep.Point(value=value, slow=aggregate.aggregate(_runs(slow, "slow", "cpu", peak_mb=100 + 10 * value)),
                        fast=aggregate.aggregate(_runs(fast, "fast", "cpu", peak_mb=90 + 6 * value)))
        p.speedup, p.parity_ok = stats.speedup(slow, fast), True
        points.append(p)
    r = sweep.SweepResult(recipe="amp", title="AMP", pair="resnet18", knob=knob, flag="--batch-size", mode="cpu",
                          rounds=2, command="make sweep-amp", points=points)
    r.crossover = sweep.crossover(points, knob)
    return r


def ladder_summary():
    spec = ladder_specs.spec("churn")
    medians = [6.0, 3.1, 2.0, 1.9, 1.8, 0.35, 0.30][:len(spec.rungs)]
    runs = {i: [run_result(ms=m * f, variant="slow", device="cuda", batch_size=512) for f in (1.0, 1.03)]
            for i, m in enumerate(medians)}
    return climb.summarize("churn", runs, [], 2, "cuda", "make ladder", [0, 1])


def diagnosis():
    result = run_result(ms=5.97, device="cuda")
    result.extra["inference"] = {"rows": [
        {"batch_size": bs, "mean_ms": ms, "throughput_per_s": bs * 1000 / ms}
        for bs, ms in ((32, 0.76), (64, 0.79), (128, 1.6), (256, 0.9), (512, 0.98), (1024, 1.09))]}
    phases = {"data": 0.87, "copy": 0.12, "forward": 1.15, "backward": 1.82, "optimizer": 0.70}
    kinds = {"other": 1070.0, "elementwise (add, mul, sub, div)": 203.0, "linear": 121.0, "reduction": 46.0,
             "dropout": 21.0, "relu": 9.0, "loss": 4.0, "sigmoid": 2.0}
    analysis = Diagnosis(
        baseline=Baseline(batch_size=32, median_ms=5.97, p95_ms=6.1, cv=0.01, throughput=5360.0, peak_mb=900.0),
        bottleneck=Bottleneck(step_ms=5.97, costs={}),
        components=[Component(phase=p, mean_ms=ms, share=ms / 5.97) for p, ms in phases.items()],
        operations=DiagnosisOps(key="self_device_us",
                                by_kind=[KindRow(name=k, self_device_us=us) for k, us in kinds.items()]),
        findings=[], verdict="")
    return result, analysis


def overview_table():
    comparisons = {r: saved_comparison(r) for r in ("amp", "checkpointing", "dataloader", "fused_ops")}
    comparisons["sync_removal"] = cpu_comparison()
    return index.rows(comparisons)


# --- what is drawn ---------------------------------------------------------------------------------

def drawn_texts(fig, monkeypatch):
    """Every text matplotlib draws on the canvas (after its own layout), with its box in pixels."""
    import functools

    from matplotlib.text import Text

    drawn, draw = {}, Text.draw

    @functools.wraps(draw)
    def record(self, renderer):
        if self.get_visible() and self.get_text().strip():
            drawn[id(self)] = self
        return draw(self, renderer)

    monkeypatch.setattr(Text, "draw", record)
    fig.canvas.draw()
    monkeypatch.setattr(Text, "draw", draw)
    renderer = fig.canvas.get_renderer()
    return [(t, t.get_window_extent(renderer)) for t in drawn.values()]


def assert_readable(fig, monkeypatch):
    """No text outside the figure, no two texts on top of each other (touching is allowed)."""
    texts = drawn_texts(fig, monkeypatch)
    assert texts
    box = fig.bbox
    for t, b in texts:
        assert b.x0 >= box.x0 - 1 and b.y0 >= box.y0 - 1 and b.x1 <= box.x1 + 1 and b.y1 <= box.y1 + 1, \
            f"{t.get_text()!r} lies outside the figure: {b} not in {box}"
    for i, (t, a) in enumerate(texts):
        for u, b in texts[i + 1:]:
            overlap = min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0)
            assert min(overlap) <= 1, f"{t.get_text()!r} overlaps {u.get_text()!r}"
    return [t.get_text() for t, _ in texts]


def assert_speedup_axis(ax, which="y"):
    """Log-scaled, ticks labelled 0.5x, 1x, 2x (1x among them), nothing like 10^0."""
    assert (ax.get_yscale() if which == "y" else ax.get_xscale()) == "log"
    labels = [t.get_text() for t in (ax.get_yticklabels() if which == "y" else ax.get_xticklabels())]
    assert "1x" in labels and len(labels) >= 2, labels
    for label in labels:
        assert label.endswith("x") and float(label[:-1]) > 0, labels


def assert_plain_ticks(ax, values):
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(v) for v in values]


def close(fig):
    from common.render import plots

    plots.pyplot().close(fig)


# --- the plots ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: saved_comparison("amp"), lambda: saved_comparison("dataloader"),
                                  cpu_comparison], ids=["h100-amp", "h100-dataloader", "cpu-sequential"])
def test_the_recipe_plot_reads_at_a_glance(make, monkeypatch):
    comparison = make()
    fig = report._figure(comparison)
    texts = assert_readable(fig, monkeypatch)
    top = fig.axes[0]
    assert_speedup_axis(top, "x")
    for e in comparison.workloads.values():  # the verdict is a caption under the panel, not its title
        caption = next(t for t in texts if report.verdict(e) in t.replace("\n", " "))
        assert not any(caption == ax.get_title() for ax in fig.axes)
    assert all(len(line) <= 70 for t in texts for line in t.splitlines())
    close(fig)
    assert report._plot(comparison)[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("knob,values", [("batch size", (2, 4, 8, 16, 32)),
                                         ("DataLoader workers", (0, 1, 2, 4, 8))])
def test_the_sweep_plot_reads_at_a_glance(knob, values, monkeypatch):
    r = sweep_result(knob, values)
    wide = max(p.speedup.high for p in r.points)
    assert wide > 1000  # a two-process interval: it must not set the axis
    fig = render_sweep._figure(r)
    texts = assert_readable(fig, monkeypatch)
    ax, mem = fig.axes[:2]
    assert_speedup_axis(ax, "y")
    low, high = ax.get_ylim()
    assert high <= 64 and low >= 1 / 64  # from the point estimates, with a margin
    assert max(p.speedup.ratio for p in r.points) * 1.2 < high
    assert_plain_ticks(ax, values)
    assert_plain_ticks(mem, values)
    assert "interval runs past the axis" in texts  # the clipped ends are marked, and the mark explained
    assert "faster (interval above 1x)" in texts and "slower (interval below 1x)" in texts
    close(fig)


def test_the_ladder_plot_reads_at_a_glance(monkeypatch):
    summary = ladder_summary()
    fig = render_ladder._figure(summary)
    texts = assert_readable(fig, monkeypatch)
    top = fig.axes[0].child_axes[0]  # the speedup over rung 0, above the samples/s
    assert top.get_xscale() in ("log", "functionlog")  # a secondary axis: log of samples/s over rung 0's
    labels = [t.get_text() for t in top.get_xticklabels()]
    assert "1x" in labels and all(t.endswith("x") for t in labels)
    assert not any("^" in t or "10^" in t for t in texts)
    assert f"{summary.rungs[-1].cumulative:.1f}x" in texts
    close(fig)


def test_the_diagnosis_plot_reads_at_a_glance(monkeypatch):
    result, analysis = diagnosis()
    fig = render_diagnosis._figure("churn", result, analysis)
    texts = assert_readable(fig, monkeypatch)
    assert_plain_ticks(fig.axes[2], [32, 64, 128, 256, 512, 1024])
    assert not any("$" in t for t in texts)  # no mathtext: 2^5, 10^5
    close(fig)


def test_the_overview_plot_reads_at_a_glance(monkeypatch):
    table = overview_table()
    fig = index._figure(table)
    texts = assert_readable(fig, monkeypatch)
    ax = fig.axes[0]
    assert_speedup_axis(ax, "x")
    low, high = ax.get_xlim()
    ratios = [r.speedup.ratio for r in table if r.speedup]
    assert low < min(ratios) and high > max(ratios) and high <= 16
    assert "interval runs past the axis" in texts
    close(fig)


# --- the shared pieces -------------------------------------------------------------------------------

def test_speedup_limits_come_from_the_points_and_cover_1x():
    from common.render import plots

    assert plots.speedup_limits([1.11, 0.78]) == (0.5, 2.0)
    assert plots.speedup_limits([4.83]) == (0.5, 8.0)
    assert plots.speedup_limits([0.43, 0.59]) == (0.25, 2.0)
    assert plots.speedup_text(0.5) == "0.5x" and plots.speedup_text(4.0) == "4x"


def test_an_interval_is_clipped_to_the_axis_and_says_which_end():
    from common.render import plots

    assert plots.clip_interval(0.9, 115.0, 0.5, 4.0) == (0.9, 4.0, False, True)
    assert plots.clip_interval(0.01, 1.5, 0.5, 4.0) == (0.5, 1.5, True, False)
    assert plots.clip_interval(1.1, 1.2, 0.5, 4.0) == (1.1, 1.2, False, False)
    assert plots.clip_interval(8.0, 9.0, 0.5, 4.0) == (4.0, 4.0, False, True)  # all above: a caret at the top
