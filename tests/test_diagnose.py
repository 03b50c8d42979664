"""The four-phase diagnosis finds planted bottlenecks, and `make diagnose-<workload>` runs end to end."""
import pytest

from common import diagnose
from conftest import REPO, run_module

PLANTED = REPO / "tests" / "planted"


def diagnosed(tmp_path, *args, script_args=()):
    proc = run_module("common.diagnose", *args, "--smoke", "--data", "synthetic", "--reports-dir", str(tmp_path),
                      *(["--", *script_args] if script_args else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_slow_loader_is_diagnosed_as_data_loading(tmp_path):
    proc = diagnosed(tmp_path, "--script", str(PLANTED / "churn_slowdata.py"), script_args=("--steps", "12"))
    assert "verdict: CPU-bound on data loading:" in proc.stdout
    md = (tmp_path / "baseline_churn.md").read_text()
    share = float(md.split("CPU-bound on data loading: ")[1].split("%")[0])
    assert share >= 50  # 50 ms of sleep against about 15 ms of CPU compute per step
    assert "[`dataloader`](../recipes/dataloader/README.md)" in md


def test_a_planted_item_gives_a_sync_finding_and_nothing_about_data(tmp_path):
    proc = diagnosed(tmp_path, "--script", str(PLANTED / "churn_itemsync.py"))
    assert "- host syncs: 1.0 .item() calls" in proc.stdout
    assert "data loading" not in proc.stdout
    assert "sync_removal" in (tmp_path / "baseline_churn.md").read_text()


def test_diagnose_churn_baseline_writes_all_four_phases(tmp_path):
    diagnosed(tmp_path, "churn")
    md = (tmp_path / "baseline_churn.md").read_text()
    for section in ("## Verdict", "## Phase 1: baseline", "## Phase 2: bottleneck type", "## Phase 3: component",
                    "## Phase 4: operations", "## Memory and traces"):
        assert section in md
    # the seed's model syncs twice per step (its forward's .item() and the loss's)
    assert ".item() calls (CPU proxy for syncs) per step: 2.0" in md
    assert "NVML unavailable" in md and "sweet spot: **batch" in md
    for kind in ("linear", "relu", "dropout", "sigmoid", "elementwise"):
        assert f"| {kind} |" in md
    assert "memory_timeline.html" in md and (tmp_path / "baseline_churn.png").stat().st_size > 10_000


def test_bad_input_is_one_line(tmp_path):
    proc = run_module("common.diagnose", "--script", str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such file" in proc.stderr
    proc = run_module("common.diagnose")
    assert proc.returncode == 2 and "give a workload" in proc.stderr


@pytest.mark.parametrize("data_share, compute_share, syncs, expected", [
    (0.7, 0.3, 0.0, "data loading"), (0.05, 0.5, 3.0, "host syncs"), (0.05, 0.5, 0.0, "none dominant"),
    (0.05, 0.95, 2.0, "GPU compute")])  # on CPU: compute-bound wins over two reads
def test_analyse_rules(data_share, compute_share, syncs, expected):
    step = 10.0
    result = {"device": "cpu", "timing": {"mean_ms": step, "median_ms": step, "p95_ms": step, "cv": 0.0,
                                          "throughput_per_s": 1.0,
                                          "phase_ms": {"data": {"mean_ms": data_share * step},
                                                       "forward": {"mean_ms": compute_share * step}}},
              "evidence": {"syncs_per_step": syncs}, "memory": {"peak_rss_mb": 1.0}, "config": {"batch_size": 1}}
    assert diagnose.analyse(result)["findings"][0]["kind"] == expected
