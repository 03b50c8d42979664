"""Faults mid-run and measurement integrity: the report stays honest and nothing is half-written."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from common.measure import gpu_monitor

from conftest import REPO


def run_compare(tmp_path, *flags, fault=None, workloads="churn"):
    """The runner's failure handling is under test, not the evidence: no profiled steps."""
    env = {**os.environ, **({"COOKBOOK_FAULT": fault} if fault else {})}
    cmd = [sys.executable, "-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
           "--workloads", workloads, "--reports-dir", str(tmp_path), *flags, "--", "--profile-steps", "0"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)


def leftovers(folder):
    """Temporary files of atomic writes that were not renamed into place."""
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".write-test")]


def test_out_of_memory_is_a_result_not_a_crash(tmp_path):
    proc = run_compare(tmp_path, fault="oom:fast", workloads="churn,resnet18")
    assert proc.returncode == 0, proc.stderr
    assert "churn      fast    out of memory at batch 32 (timed steps)" in proc.stdout
    md = (tmp_path / "amp.md").read_text()
    assert "**fast: out of memory at batch 32** (timed steps)" in md and "- slow ran: " in md
    assert " ms per step, p95 " in md
    assert "## resnet18" in md and "out of memory at batch 4" in md  # the same fault hits every fast twin
    assert not leftovers(tmp_path)


def test_a_crashing_variant_is_named_and_the_rest_still_runs(tmp_path):
    proc = run_compare(tmp_path, fault="crash:slow:resnet18", workloads="churn,resnet18")
    assert proc.returncode == 1
    assert "resnet18 slow round 1 failed (exit 1)" in proc.stderr
    assert "RuntimeError: injected crash" in proc.stderr  # the last lines of its output
    md = (tmp_path / "amp.md").read_text()
    assert "## Failed runs" in md and "- resnet18 slow round 1: exit 1" in md and "injected crash" in md
    assert "Parity of the training loss (passed)" in md  # churn was still compared
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_the_previous_report_and_finished_results(tmp_path, sig):
    previous = "# the previous report\n"
    (tmp_path / "amp.md").write_text(previous)
    cmd = [sys.executable, "-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
           "--workloads", "churn",
           "--rounds", "2", "--reports-dir", str(tmp_path)]
    # a shell's background job inherits SIGINT ignored; a user's Ctrl-C reaches a foreground process.
    # Plain child processes (no zygote), and the second run's steps stretched 200-fold (the fast twin
    # of round 1 takes the second pace): the signal lands inside the second run even on a loaded host
    plain = {**{k: v for k, v in os.environ.items() if k != "COOKBOOK_ZYGOTE"}, "COOKBOOK_FAULT": "pace:1,200"}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=plain,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = ""
    while "[2/4" not in out:  # the first run has finished, the second has started
        char = proc.stdout.read(1)  # the progress line ends only when its run does
        assert char, "the runner ended before its second run"
        out += char
    time.sleep(1.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert (tmp_path / "amp.md").read_text() == previous
    assert not (tmp_path / "amp.png").exists()
    finished = list((tmp_path / "results" / "amp").glob("*/churn_slow_r1.json"))
    assert len(finished) == 1 and json.loads(finished[0].read_text())["status"] == "ok"
    assert not list((tmp_path / "results" / "amp").glob("*/churn_fast_r1.json"))
    assert not leftovers(tmp_path)


def test_two_runs_at_once_keep_their_files_apart(tmp_path):
    cmd = [sys.executable, "-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
           "--workloads", "churn",
           "--reports-dir", str(tmp_path)]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert any("another amp comparison is running" in err for _, err in outs)
    runs = sorted(p for p in (tmp_path / "results" / "amp").iterdir() if p.is_dir())
    assert len(runs) == 2
    for run in runs:
        comparison = json.loads((run / "comparison.json").read_text())
        assert comparison["workloads"]["churn"]["parity"]["ok"]
        for v in ("slow", "fast"):
            assert json.loads((run / f"churn_{v}_r1.json").read_text())["variant"] == v
    md = (tmp_path / "amp.md").read_text()
    assert md.count("## churn") == 1 and not leftovers(tmp_path)


def test_noisy_processes_are_flagged_with_advice():
    from common.analysis.aggregate import aggregate
    from common.render import report

    from tests_helpers import run_result

    assert report.noisy(aggregate([run_result(ms=m) for m in (10, 14, 9)]))
    assert not report.noisy(aggregate([run_result(ms=m) for m in (10, 10.2, 9.9)]))
    assert "re-run" in report.NOISY_ADVICE and "10%" in report.NOISY_ADVICE


class FakeNvml:
    """Just enough of pynvml for the monitor: a throttled GPU whose clock drops, with a neighbour."""
    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def __init__(self):
        self.calls = 0

    def nvmlInit(self): pass
    def nvmlDeviceGetHandleByIndex(self, i): return "gpu0"
    def nvmlDeviceGetUtilizationRates(self, h): return type("U", (), {"gpu": 97, "memory": 40})()
    def nvmlDeviceGetMemoryInfo(self, h): return type("M", (), {"used": 2**30})()
    def nvmlDeviceGetTemperature(self, h, kind): return 83
    def nvmlDeviceGetPowerUsage(self, h): return 650_000
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700_000
    def nvmlDeviceGetPerformanceState(self, h): return 0
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0x1 | 0x20  # idle (ignored) + thermal
    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [type("P", (), {"pid": os.getpid()})(), type("P", (), {"pid": 4242})()]

    def nvmlDeviceGetClockInfo(self, h, kind):
        if kind == self.NVML_CLOCK_MEM:
            return 2619
        self.calls += 1
        return 1980 if self.calls < 3 else 1410


def test_gpu_monitor_turns_throttling_clocks_and_neighbours_into_warnings(monkeypatch):
    monkeypatch.setattr(gpu_monitor, "_nvml", lambda: FakeNvml())
    with gpu_monitor.GpuMonitor(torch.device("cuda", 0), interval_s=0.01) as mon:
        time.sleep(0.1)
    report = mon.report()
    assert report.available and report.samples >= 2
    warnings = " | ".join(report.warnings)
    assert "software thermal slowdown" in warnings and "idle" not in warnings
    assert "SM clock changed during the run: 1410-1980 MHz" in warnings
    assert "other processes on the GPU during the run: pid 4242" in warnings


def test_gpu_monitor_is_off_with_a_notice_on_cpu():
    mon = gpu_monitor.GpuMonitor(torch.device("cpu"))
    with mon:
        pass
    assert mon.report().to_json() == {"available": False, "notice": "GPU monitor off: no CUDA device", "warnings": []}
