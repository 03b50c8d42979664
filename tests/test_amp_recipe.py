"""`make recipe-amp` in smoke mode: both pairs run, pass parity, and the report has what it promises."""
import json

from common.analysis.results import SCHEMA_VERSION
from common.measure import profiling

from conftest import run_module

WORKLOADS = ("churn", "resnet18")


def test_comparison_succeeds_with_parity(amp_smoke):
    proc, reports = amp_smoke
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    assert comparison["schema_version"] == SCHEMA_VERSION
    for w in WORKLOADS:
        entry = comparison["workloads"][w]
        assert entry["parity"]["ok"] and entry["parity"]["max_rel"] <= entry["parity"]["rtol"]
        assert entry["speedup"]["ratio"] > 0 and entry["speedup"]["verdict"] == "undecided"  # one process each
        assert entry["speedup"]["low"] is None and entry["slow"]["process_medians_ms"]
    assert "parity ok" in proc.stdout and "FAILED" not in proc.stdout


def test_each_run_writes_a_complete_result(amp_smoke):
    _, reports = amp_smoke
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    folder = reports / "results" / "amp" / comparison["results_dir"].rsplit("/", 1)[-1]
    assert folder.is_dir()
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*"))  # atomic writes leave nothing behind
    for w in WORKLOADS:
        for v in ("slow", "fast"):
            r = json.loads((folder / f"{w}_{v}_r1.json").read_text())
            assert r["status"] == "ok" and r["warnings"] == []
            assert r["schema_version"] == SCHEMA_VERSION and (r["recipe"], r["workload"], r["variant"]) == ("amp", w, v)
            t = r["timing"]
            assert t["summary"]["n"] == r["config"]["steps"] == len(t["step_ms"]) and t["summary"]["median_ms"] > 0
            assert {"mean_ms", "std_ms", "cv", "p95_ms", "p99_ms", "min_ms", "throughput_per_s"} <= set(t["summary"])
            assert t["warmup_s"] > 0 and 0 <= t["data_wait_share"] <= 1
            assert r["memory"]["peak_mb"] > 0 and r["memory"]["kind"] == "cpu_peak_rss"
            assert r["type"] == "RunResult" and r["pair"] == w
            assert r["data_source"]["kind"] == "synthetic"
            # warm-up, timed, profiled (+1 profiler warm-up step), and the FLOP-counted step
            steps = r["config"]["warmup"] + r["config"]["steps"] + r["config"]["profile_steps"] + 1 + 1
            assert len(r["losses"]) == steps
            assert r["flops_per_step"] > 0
            assert r["env"]["device_type"] == "cpu"
            ev = r["evidence"]
            assert ev["profiled_steps"] == r["config"]["profile_steps"] and ev["ops_per_step"] > 0
            assert set(ev["views"]) == {"device_time", "self_memory", "cpu_time", "calls", "by_kind"}
            assert all(ev["views"][k]["rows"] for k in ev["views"])


def test_report_has_environment_tables_evidence_and_diffs(amp_smoke):
    _, reports = amp_smoke
    md = (reports / "amp.md").read_text()
    assert "CPU" in md and "not a GPU result" in md and "smoke" in md
    assert "synthetic" in md and "not real data" in md
    for w in WORKLOADS:
        assert f"## {w}" in md
        assert f"[side by side](amp_{w}_diff.html)" in md
        assert (reports / f"amp_{w}_diff.html").read_text().count("<table") >= 1
        assert f"+++ {w}_fast.py" in md
    for title in ("self memory", "CPU time", "call count"):
        assert md.count(title) >= 2
    assert md.count(": per-process medians ") == 4 and md.count("Parity of the training loss (passed)") == 2
    assert md.count("no interval: 1 process each") == 2 and "nothing to read: HTA reads GPU traces" in md
    assert "make tensorboard" in md and "127.0.0.1:6006" in md
    assert (reports / "amp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_traces_written_per_variant(amp_smoke):
    _, reports = amp_smoke
    for w in WORKLOADS:
        for v in ("slow", "fast"):
            trace = reports / "traces" / "amp" / f"{w}_{v}" / f"{w}_{v}.pt.trace.json"
            events = json.loads(trace.read_text())["traceEvents"]
            assert any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events)
            assert any(e.get("name") == "forward" for e in events)  # the harness's phase ranges


def test_parity_failure_exits_nonzero_and_says_by_how_much(tmp_path):
    proc = run_module("common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--workloads", "churn", "--parity-rtol", "1e-9", "--reports-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "parity FAILED for amp/churn: the 10-step mean loss differs by" in proc.stderr
    assert "mean loss differs by" in proc.stderr and "(tolerance 1e-07%)" in proc.stderr


def test_trace_evidence_counts_syncs_kernels_and_idle(tmp_path):
    """A hand-made CUDA-style trace: 2 steps, 3 kernels, 1 sync; the GPU busy 30 of 100 us."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 50, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 11, "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": 10},  # overlaps k1: counted once
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 60, "dur": 15},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    ev = profiling.trace_evidence(path, torch.device("cuda"))
    assert ev["profiled_steps"] == 2 and ev["kernels_per_step"] == 1.5 and ev["syncs_per_step"] == 0.5
    assert abs(ev["gpu_idle_share"] - 0.7) < 1e-9
    assert ev["sync_ms_per_step"] == 0.0025  # the read and the sync inside it, 5 us, counted once over 2 steps
    assert ev["gpu_busy_ms_per_step"] == 0.015 and ev["profiled_step_ms"] == 0.05
    # the GPU is idle 70 us, none of it while the host waits in the sync (the GPU is busy then)
    assert abs(ev["idle_host_busy_ms_per_step"] - 0.035) < 1e-12
    cpu = profiling.trace_evidence(path, torch.device("cpu"))
    assert cpu["syncs_per_step"] == 0.5 and cpu["kernels_per_step"] is None


def test_amp_changes_precision_not_the_arithmetic(amp_smoke):
    """The same FLOPs per step in both twins: AMP makes each one cheaper, not fewer."""
    _, reports = amp_smoke
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    for w in WORKLOADS:
        entry = comparison["workloads"][w]
        assert entry["fast"]["flops_per_step"] == entry["slow"]["flops_per_step"] > 0


def test_phase_evidence_attributes_kernels_by_correlation_and_counts_top_level_ops(tmp_path):
    """A hand-made CUDA-style trace of 1 step: the optimizer range calls 2 ops (one with a nested
    op) and launches 2 kernels; a launch on another thread inside the same time span is not its own."""
    ann = lambda name, ts, dur, tid=1: {"ph": "X", "cat": "user_annotation", "name": name,  # noqa: E731
                                        "ts": ts, "dur": dur, "tid": tid}
    events = [
        ann("ProfilerStep#1", 0, 100),
        ann("optimizer", 50, 40),
        {"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_add_", "ts": 52, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "ts": 53, "dur": 2, "tid": 1},  # nested: not a call
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul_", "ts": 70, "dur": 5, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 55, "dur": 1, "tid": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 71, "dur": 1, "tid": 1,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 60, "dur": 1, "tid": 2,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "k7", "ts": 58, "dur": 4, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k8", "ts": 75, "dur": 6, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "k9", "ts": 62, "dur": 50, "args": {"correlation": 9}},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    opt = profiling.trace_evidence(path, torch.device("cuda"), ("optimizer", "forward"))["phases"]["optimizer"]
    assert opt == {"host_ms": 0.04, "ops": 2, "kernels": 2, "kernel_ms": 0.01}
    cpu = profiling.trace_evidence(path, torch.device("cpu"), ("optimizer",))["phases"]["optimizer"]
    assert cpu["ops"] == 2 and cpu["kernels"] is None


def test_a_sync_is_a_device_read_or_a_sync_call_on_its_own(tmp_path):
    """Per step: a scalar read with the sync call inside it counts once; a sync call on its own
    counts; a read of a CPU tensor inside optimizer.step() (Adam's step counter) does not; the
    profiler's own synchronize after the last step lies outside the steps and does not count."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 10, "dur": 5, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 11, "dur": 3, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 30, "dur": 4, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#Adam.step", "ts": 50, "dur": 20, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 55, "dur": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 150, "dur": 60, "tid": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 10},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    ev = profiling.trace_evidence(path, torch.device("cuda"))
    assert ev["syncs_per_step"] == 2 and ev["sync_ms_per_step"] == 0.009
