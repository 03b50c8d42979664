"""`make ladder` in smoke mode: every rung runs, keeps parity with the naive rung 0, and changes
what it says it changes against the rung below."""
import pytest

import ladder
from common.analysis import metrics
from common.analysis.results import LadderSummary, read_result
from ladder import techniques

from conftest import run_module


@pytest.fixture(scope="module")
def climbed(tmp_path_factory):
    reports = tmp_path_factory.mktemp("ladder")
    proc = run_module("common.runners.climb", "--smoke", "--device", "cpu", "--data", "synthetic", "--reports-dir",
                      str(reports), timeout=1500)
    return proc, reports


def summary(reports, workload) -> LadderSummary:
    return read_result(reports / "results" / "ladder" / f"{workload}.json", LadderSummary)


def test_every_rung_runs_and_passes_parity_against_the_naive_one(climbed):
    proc, reports = climbed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, spec in ladder.LADDERS.items():
        rungs = summary(reports, w).rungs
        assert [r.id for r in rungs] == spec.ids
        assert all(r.status == "ok" for r in rungs)
        assert rungs[0].parity is None and all(r.parity.ok for r in rungs[1:]), w
        md = (reports / f"ladder_{w}.md").read_text()
        assert md.count("| ok") == len(rungs) - 1 and "not a GPU result" in md and "Not checked" in md
        assert all(f"(`{i}`)" in md for i in spec.ids)


def test_every_rung_changes_what_it_says_against_the_rung_below(climbed):
    """Each rung declares what its technique moves (ladder.RungSpec.changes): a metric, the config,
    or a fact the script observed. Checked against the rung below, on this CPU run."""
    _, reports = climbed
    checked = 0
    for w, spec in ladder.LADDERS.items():
        rungs = summary(reports, w).rungs
        for below, rung, rs in zip(rungs, rungs[1:], spec.rungs[1:]):
            a, b = below.aggregate, rung.aggregate
            assert rs.changes, f"{w} rung {rs.id} declares no change"
            for kind, key, want in rs.changes:
                if kind == "metric":
                    x, y = metrics.get(key).value(a), metrics.get(key).value(b)
                    assert x is not None and y is not None, (w, rs.id, key)
                    assert (y < x) if want == "down" else (y > x), (w, rs.id, key, x, y)
                elif kind == "config":
                    assert getattr(b.config, key) > getattr(a.config, key), (w, rs.id, key)
                else:
                    assert b.extra["observed"][key] == want != a.extra["observed"].get(key), (w, rs.id, key)
                checked += 1
    assert checked >= 15


def test_the_same_data_gives_the_same_losses_until_the_data_changes(climbed):
    """Churn serves the same requests with the same weights on every rung; ResNet-18's first rungs
    see the same crops (seeded per sample), so only their speed may differ."""
    _, reports = climbed
    for r in summary(reports, "churn").rungs[1:]:
        assert r.parity.max_rel <= 1e-4, r.name
    for r in summary(reports, "resnet18").rungs[1:3]:
        assert r.parity.max_rel <= 1e-6, r.name


def test_syncs_leave_at_their_rung(climbed):
    _, reports = climbed
    for w, rung in (("churn", 2), ("resnet18", 2)):
        syncs = [r.aggregate.evidence.syncs_per_step for r in summary(reports, w).rungs]
        assert syncs[rung - 1] >= 1 and all(s == 0 for s in syncs[rung:]), (w, syncs)


def test_speedups_are_against_rung_0_and_the_rung_below(climbed):
    _, reports = climbed
    rungs = summary(reports, "resnet18").rungs
    assert rungs[-1].aggregate.config.batch_size > rungs[-2].aggregate.config.batch_size
    assert rungs[-1].cumulative == pytest.approx(
        rungs[-1].aggregate.throughput_per_s / rungs[0].aggregate.throughput_per_s)
    per_sample = lambda r: r.aggregate.median_ms / r.aggregate.config.batch_size  # noqa: E731
    for below, rung in zip(rungs, rungs[1:]):
        assert rung.incremental.ratio == pytest.approx(per_sample(below) / per_sample(rung))


def test_incremental_speedup_is_against_the_rung_below_even_after_a_failure():
    """The old code compared with the last rung that ran: after a failed rung, against two below."""
    from common.runners.climb import summarize

    from tests_helpers import run_result

    runs = {0: [run_result(median=10.0)], 2: [run_result(median=5.0)]}  # rung 1 failed
    table = summarize("churn", runs, [], 1, "cpu", "test").rungs
    assert table[1].status == "failed" and table[2].incremental is None and table[2].cumulative == 2.0


def test_unknown_ladder_and_rung_are_one_line():
    proc = run_module("common.runners.climb", "gpt2")
    assert proc.returncode == 2 and "no ladder for gpt2" in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_module("ladder.churn_serving", "--rung", "warp_drive", "--smoke")
    assert proc.returncode == 2 and "no rung 'warp_drive'" in proc.stderr and proc.stderr.count("\n") == 1


def test_techniques_are_switched_by_id_and_an_unknown_id_raises():
    on = ladder.switches("resnet18", ladder.rung_index("resnet18", "channels_last"))
    assert on("loader_workers") and on("channels_last") and not on("amp")
    with pytest.raises(KeyError, match="no technique 'warp_drive'"):
        on("warp_drive")
    assert ladder.rung_index("resnet18", "3") == 3


def test_fp16_gets_a_grad_scaler_bf16_does_not(monkeypatch):
    import torch

    made = []
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: made.append((device, enabled)))
    techniques.grad_scaler(torch.device("cpu"), True)  # the CPU autocasts to bf16
    monkeypatch.setattr(ladder, "amp_dtype", lambda device: torch.float16)  # a GPU without bf16
    techniques.grad_scaler(torch.device("cuda"), True)
    techniques.grad_scaler(torch.device("cuda"), False)  # a rung below AMP
    assert made == [("cpu", False), ("cuda", True), ("cuda", False)]


def test_targets_are_checked_only_on_a_gpu_run_and_say_by_how_much():
    from common.analysis.aggregate import aggregate
    from common.analysis.results import Rung
    from common.runners.climb import _targets

    from tests_helpers import run_result

    def rung(i, median_ms, batch, cumulative, rid=None):
        agg = aggregate([run_result(median=median_ms, batch_size=batch)])
        return Rung(index=i, id=rid or f"r{i}", name="x", adds="", status="ok", aggregate=agg, cumulative=cumulative)

    gpu = LadderSummary(workload="resnet18", what="", mode="cuda", command="", failures=[],
                        rungs=[rung(0, 64.0, 32, 1.0), rung(1, 32.0, 256, 16.0)])
    text = "\n".join(_targets(gpu))
    assert "8,000 images/s: missed (2.25x short)" in text and "cumulative speedup 16.0x: missed (36x wanted)" in text
    churn = LadderSummary(workload="churn", what="", mode="cuda", command="", failures=[],
                          rungs=[rung(0, 2.0, 512, 1.0), rung(1, 0.3, 512, 6.7, "cuda_graphs"),
                                 rung(2, 0.1, 512, 20.0, "hand_graph")])
    text = "\n".join(_targets(churn))
    assert "p99/median 1.01: met" in text and "3.00x: missed (1.2x wanted)" in text and "20.0x: met" in text
    gpu.mode = "cpu"
    assert "Not checked" in "\n".join(_targets(gpu))


def test_a_rung_throughput_has_an_interval_over_processes():
    from common.analysis import stats

    lo, hi = stats.level_interval([1000.0, 1100.0, 1050.0])
    assert lo < 1048 < hi and stats.level_interval([1000.0]) is None
