"""`make ladder` in smoke mode: every rung runs and keeps parity with the naive rung 0."""
import json

import pytest

import ladder
from conftest import run_module


@pytest.fixture(scope="module")
def climbed(tmp_path_factory):
    reports = tmp_path_factory.mktemp("ladder")
    proc = run_module("common.ladder", "--smoke", "--data", "synthetic", "--reports-dir", str(reports), timeout=1500)
    return proc, reports


def summary(reports, workload):
    return json.loads((reports / "results" / "ladder" / f"{workload}.json").read_text())


def test_every_rung_runs_and_passes_parity_against_the_naive_one(climbed):
    proc, reports = climbed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, spec in ladder.RUNGS.items():
        rungs = summary(reports, w)["rungs"]
        assert [r["name"] for r in rungs] == [r["name"] for r in spec["rungs"]]
        assert all(r["status"] == "ok" for r in rungs)
        assert rungs[0]["parity"] is None and all(r["parity"]["ok"] for r in rungs[1:]), w
        md = (reports / f"ladder_{w}.md").read_text()
        assert md.count("| ok") == len(rungs) - 1 and "not a GPU result" in md and "Not checked" in md


def test_the_same_data_gives_the_same_losses_until_the_data_changes(climbed):
    """Churn serves the same requests with the same weights on every rung; ResNet-18's first rungs
    see the same crops (seeded per sample), so only their speed may differ."""
    _, reports = climbed
    for r in summary(reports, "churn")["rungs"][1:]:
        assert r["parity"]["max_rel"] <= 1e-4, r["name"]
    for r in summary(reports, "resnet18")["rungs"][1:3]:
        assert r["parity"]["max_rel"] <= 1e-6, r["name"]


def test_syncs_leave_at_their_rung(climbed):
    _, reports = climbed
    for w, rung in (("churn", 2), ("resnet18", 2)):
        syncs = [r["evidence"]["syncs_per_step"] for r in summary(reports, w)["rungs"]]
        assert syncs[rung - 1] >= 1 and all(s == 0 for s in syncs[rung:]), (w, syncs)


def test_the_larger_batch_rung_runs_a_larger_batch(climbed):
    _, reports = climbed
    rungs = summary(reports, "resnet18")["rungs"]
    assert rungs[-1]["batch_size"] > rungs[-2]["batch_size"]
    assert rungs[-1]["cumulative"] == pytest.approx(
        rungs[-1]["stats"]["throughput_per_s"] / rungs[0]["stats"]["throughput_per_s"])


def test_unknown_ladder_is_one_line():
    proc = run_module("common.ladder", "gpt2")
    assert proc.returncode == 2 and "no ladder for gpt2" in proc.stderr and proc.stderr.count("\n") == 1


def test_targets_are_checked_only_on_a_gpu_run_and_say_by_how_much():
    from common.ladder import _targets

    def rung(ips, p99_ms, cumulative):
        return {"status": "ok", "name": "x", "stats": {"throughput_per_s": ips, "p99_ms": p99_ms},
                "cumulative": cumulative}

    gpu = {"workload": "resnet18", "mode": "cuda", "rungs": [rung(500, 70, 1.0), rung(5000, 7, 10.0)]}
    text = "\n".join(_targets(gpu))
    assert "5,000 images/s: missed by 2.0x" in text and "cumulative speedup 10.0x: met" in text
    churn = {"workload": "churn", "mode": "cuda", "rungs": [rung(1e5, 1.0, 1.0), rung(9e6, 0.08, 90.0)]}
    assert "0.080 ms: met" in "\n".join(_targets(churn))
    assert "Not checked" in "\n".join(_targets({**gpu, "mode": "cpu"}))
