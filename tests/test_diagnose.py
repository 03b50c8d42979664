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


@pytest.fixture(scope="module")
def churn_diagnosis(tmp_path_factory):
    reports = tmp_path_factory.mktemp("diagnosis")
    diagnosed(reports, "churn")
    return reports


def test_diagnose_churn_baseline_writes_all_four_phases(churn_diagnosis):
    tmp_path = churn_diagnosis
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


def test_the_gpu_parts_of_the_report_render(churn_diagnosis, tmp_path):
    """What only a GPU run fills in (NVML conditions, per-batch GPU columns, per-phase peaks, the
    snapshot), rendered from a CPU result with those parts added."""
    import json

    result = json.loads(next(churn_diagnosis.glob("results/diagnose/*/result.json")).read_text())
    nvml = {"available": True, "gpu_util_mean": 35.0, "mem_used_mb_max": 900.0, "temp_c_max": 41, "power_w_mean": 80.0,
            "power_limit_w": 700.0, "sm_clock_mhz": [1980, 1980], "mem_clock_mhz": [2619, 2619], "pstates": [0],
            "throttle_reasons": [], "warnings": []}
    result["gpu_monitor"] = nvml
    for row in result["extra"]["inference"]["rows"]:
        row["gpu"] = nvml
    result["timing"]["phase_peak_mb"] = {"forward": 123.0}
    result["evidence"]["memory"] = {"snapshot": "/x/churn_mlp_memory_snapshot.pickle", "view_snapshot": "open memory_viz",
                                    "notes": []}
    analysis = diagnose.analyse(result)
    md = diagnose.render("churn", result, analysis, "test", tmp_path)[0].read_text()
    assert "GPU util 35% mean, SM clock 1980-1980 MHz, memory clock 2619-2619 MHz, P-states [0]" in md
    assert "| 35% | 900 | 41 | 80 (700) | 1980 / 2619 | [0] | none |" in md
    assert "| forward |" in md and "| 123 |" in md and "CUDA memory snapshot" in md
