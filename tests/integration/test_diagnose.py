"""The four-phase diagnosis finds planted bottlenecks, and `make diagnose-<workload>` runs end to end."""
import pytest

from common.runners import diagnose

from conftest import REPO, run_module

pytestmark = pytest.mark.xdist_group("diagnose")  # one worker builds the module fixture once

PLANTED = REPO / "tests" / "planted"


def diagnosed(tmp_path, *args, script_args=()):
    proc = run_module("common.runners.diagnose", *args, "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(tmp_path),
                      *(["--", *script_args] if script_args else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def headline(proc) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("verdict: "))


def test_a_slow_loader_is_diagnosed_as_data_loading(tmp_path):
    proc = diagnosed(tmp_path, "--script", str(PLANTED / "churn_slowdata.py"), script_args=("--steps", "12"))
    assert headline(proc).startswith("verdict: data loading costs ")
    md = (tmp_path / "baseline_churn.md").read_text()
    share = float(md.split("**Data loading costs ")[1].split("%")[0])
    assert share >= 50  # 150 ms of sleep against about 15 ms of CPU compute per step (more on a busy machine)
    assert "[`dataloader`](../recipes/dataloader/README.md)" in md


def test_a_slow_loader_and_a_sync_headline_the_loader_because_it_costs_more(tmp_path):
    proc = diagnosed(tmp_path, "--script", str(PLANTED / "churn_slowdata_sync.py"), script_args=("--steps", "12"))
    assert headline(proc).startswith("verdict: data loading costs ")
    assert "- host syncs (0% of the step): 1.0 .item() calls" in proc.stdout  # found, and ranked by its cost


def test_a_planted_item_gives_a_sync_finding_and_no_data_headline(tmp_path):
    proc = diagnosed(tmp_path, "--script", str(PLANTED / "churn_itemsync.py"))
    assert "- host syncs (0% of the step): 1.0 .item() calls" in proc.stdout
    assert "data loading" not in headline(proc)
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
    from common.analysis.results import read_result
    from common.analysis.results_diagnose import Diagnosis

    saved = next((tmp_path / "results").rglob("analysis.json"))
    analysis = read_result(saved, Diagnosis)  # the typed record reads back whole
    assert analysis.baseline.batch_size > 0 and analysis.components and analysis.bottleneck.step_ms > 0
    assert analysis.verdict and analysis.findings[0].kind in analysis.bottleneck.costs


def test_bad_input_is_one_line(tmp_path):
    proc = run_module("common.runners.diagnose", "--script", str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such file" in proc.stderr
    proc = run_module("common.runners.diagnose")
    assert proc.returncode == 2 and "give a workload" in proc.stderr
    proc = run_module("common.runners.diagnose", "churn", "--data", "/x/telco.csv")
    assert proc.returncode == 2 and "WORKLOAD=PATH" in proc.stderr


def _result(device="cpu", data=0.0, forward=0.5, syncs=0.0, sync_ms=0.0, busy=None, idle_busy=None, step=10.0):
    """A hand-made result of a --phase-timing run: phase means, and the trace's costs."""
    from common.analysis import stats
    from common.analysis.results_run import Evidence, PhaseEvidence

    from tests_helpers import run_result

    r = run_result(ms=step, device=device)
    r.timing.phase_ms = {"data": stats.summarize([data * step], 1), "forward": stats.summarize([forward * step], 1)}
    r.evidence = Evidence(trace="t", profiled_steps=5, ops_per_step=100, syncs_per_step=syncs, sync_ops_per_step={},
                          sync_ms_per_step=sync_ms, kernels_per_step=70 if device == "cuda" else None,
                          gpu_idle_share=None if busy is None else 1 - busy / step,
                          gpu_busy_ms_per_step=busy, launch_ms_per_step=None, idle_host_busy_ms_per_step=idle_busy,
                          profiled_step_ms=step, sync_apis_per_step=None, memcpy_per_step=None,
                          phases={"forward": PhaseEvidence(1.0, 10, None, None)}, views={})
    return r


@pytest.mark.parametrize("kwargs, expected", [
    (dict(data=0.7, forward=0.3), "data loading"),
    (dict(data=0.05, forward=0.95, syncs=2.0), "CPU compute"),  # on a CPU two reads cost nothing
    (dict(data=0.05, forward=0.5), "CPU compute"),
    # on a GPU: a planted sync alone, which blocks the host most of the step
    (dict(device="cuda", data=0.0, syncs=1.0, sync_ms=6.0, busy=3.0, idle_busy=1.0), "host syncs"),
    # a loader costing most of the step and a sync: the loader
    (dict(device="cuda", data=0.8, syncs=2.0, sync_ms=1.0, busy=1.5, idle_busy=0.5), "data loading"),
    (dict(device="cuda", data=0.01, busy=0.5, idle_busy=9.0), "launch overhead"),
    (dict(device="cuda", data=0.01, busy=9.5, idle_busy=0.2), "GPU compute"),
])
def test_the_headline_is_the_largest_measured_cost(kwargs, expected):
    analysis = diagnose.analyse(_result(**kwargs))
    assert analysis.findings[0].kind == expected
    costs = [f.cost for f in analysis.findings]
    assert costs == sorted(costs, reverse=True) and all(0 <= c <= 1 for c in costs)
    assert f"{analysis.findings[0].cost:.0%}" in analysis.verdict  # the headline quotes its number


def test_the_h100_resnet18_diagnosis_would_now_headline_the_data_wait():
    """The first H100 run headlined 2.1 host syncs per step while phase timing showed 57.5 of
    75.4 ms waiting for data. The same figures, ranked by cost: data loading first."""
    r = _result(device="cuda", data=57.5 / 75.4, forward=0.2, syncs=2.1, sync_ms=2.0, busy=6.0, idle_busy=3.0,
                step=75.4)
    analysis = diagnose.analyse(r)
    assert analysis.findings[0].kind == "data loading" and "76%" in analysis.verdict
    sync = next(f for f in analysis.findings if f.kind == "host syncs")
    assert sync.cost < 0.05 and "2.1 host syncs per step" in sync.says


def test_the_gpu_parts_of_the_report_render(churn_diagnosis, tmp_path):
    """What only a GPU run fills in (NVML conditions, per-batch GPU columns, per-phase peaks, the
    snapshot), rendered from a CPU result with those parts added."""
    from common.analysis.results import read_result
    from common.analysis.results_run import GpuReport, MemoryArtifacts, RunResult

    result = read_result(next(churn_diagnosis.glob("results/diagnose/*/*/result.json")), RunResult)
    nvml = {"available": True, "gpu_util_mean": 35.0, "mem_used_mb_max": 900.0, "temp_c_max": 41, "power_w_mean": 80.0,
            "power_limit_w": 700.0, "sm_clock_mhz": [1980, 1980], "mem_clock_mhz": [2619, 2619], "pstates": [0],
            "throttle_reasons": [], "warnings": []}
    result.gpu_monitor = GpuReport(**nvml)
    for row in result.extra["inference"]["rows"]:
        row["gpu"] = nvml
    result.timing.phase_peak_mb = {"forward": 123.0}
    result.evidence.memory = MemoryArtifacts(snapshot="/x/churn_mlp_memory_snapshot.pickle",
                                             view_snapshot="open memory_viz")
    analysis = diagnose.analyse(result)
    md = diagnose.render("churn", result, analysis, "test", tmp_path)[0].read_text()
    assert "GPU util 35% mean, SM clock 1980-1980 MHz, memory clock 2619-2619 MHz, P-states [0]" in md
    assert "| 35% | 900 | 41 | 80 (700) | 1980 / 2619 | [0] | none |" in md
    assert "| forward |" in md and "| 123 |" in md and "CUDA memory snapshot" in md
