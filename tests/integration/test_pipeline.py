"""Pipelined processes (common.runners.pipeline, common.measure.gate): the next child prepares while the
current one runs, and starts its device work only once the current one has finished its own."""
import json
import os
import threading
import time
from pathlib import Path

import pytest

from common import env
from common.analysis import timeline
from common.measure import gate
from common.runners import launch, pipeline

from conftest import run_module

CORES = env.cpu_set()
TWO_CORES = pytest.mark.skipif(len(CORES) < 2, reason="a pipeline needs a core the measured children leave free")


def runs_of(folder: Path) -> list[dict]:
    found = [json.loads(p.read_text()) for p in folder.rglob("churn_*_r*.json")]
    return sorted(found, key=lambda r: r["started"])


def absolute(run: dict, mark: str) -> float:
    return run["started"] + run["timeline"][mark]


@TWO_CORES
def test_a_pipelined_child_prepares_ahead_and_starts_its_device_work_only_after_the_one_before(tmp_path):
    measured = str(CORES[-1])  # the children's cores; the others are spare, where the next one prepares
    proc = run_module("common.runners.compare", "amp", "--workloads", "churn", "--smoke", "--rounds", "2",
                      "--cpus", measured, "--device", "cpu", "--data", "synthetic", "--reports-dir", str(tmp_path),
                      "--no-report")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = runs_of(tmp_path / "results")
    assert len(runs) == 4
    assert all("ready" in r["timeline"] and "gate" in r["timeline"] for r in runs)
    for prev, nxt in zip(runs, runs[1:]):
        # it was under way before the one before it had finished: prepared ahead
        assert nxt["started"] < absolute(prev, "flop count")
        # before its gate: its start, its setup and its preparation only (no data on the device, no model)
        before = [m for m, at in nxt["timeline"].items() if at < nxt["timeline"]["gate"]]
        assert set(before) <= {"imports", "setup", "ready"}, before
        assert absolute(nxt, "gate") >= absolute(prev, "flop count")
    # no process's timed stretch inside another's device work
    for r in runs:
        timed = (absolute(r, "probe"), absolute(r, "timed"))
        for other in runs:
            if other is not r:
                span = timeline.device_span(other["timeline"])
                work = (other["started"] + span[0], other["started"] + span[1])
                assert timed[1] <= work[0] or work[1] <= timed[0], (r["variant"], other["variant"])
    gaps = timeline.handoffs([(r["started"], r["timeline"]) for r in runs])
    assert len(gaps) == 3 and min(gaps) >= 0
    assert "between processes the device waited" in proc.stdout


def test_a_gate_waits_for_the_file_then_moves_every_thread_onto_the_measured_cores(tmp_path):
    opened = tmp_path / "1.done"
    g = gate.Gate(wait=str(opened), release=str(tmp_path / "2.done"), runner=os.getpid(), cpus=[CORES[0]])
    looks = []

    def sleep(_s):
        looks.append(1)
        if len(looks) == 3:
            opened.touch()

    worker = threading.Thread(target=time.sleep, args=(0.5,))
    worker.start()
    before = os.sched_getaffinity(0)
    try:
        gate.wait(g, sleep=sleep)
        assert len(looks) == 3  # it waited until the file existed, and no longer
        for tid in os.listdir("/proc/self/task"):
            assert os.sched_getaffinity(int(tid)) == {CORES[0]}
    finally:
        gate.pin(sorted(before))
        worker.join()
    gate.release(g)
    assert (tmp_path / "2.done").exists()


def test_a_gate_whose_runner_is_gone_ends_the_process_instead_of_waiting_for_ever(tmp_path):
    beyond_pid_max = 2 ** 22 + 1  # Linux's largest pid_max is 2**22: no process has this pid
    g = gate.Gate(wait=str(tmp_path / "never"), release=str(tmp_path / "r"), runner=beyond_pid_max, cpus=[])
    now = iter(range(0, 100))
    with pytest.raises(SystemExit, match="ended before this process's turn"):
        gate.wait(g, clock=lambda: float(next(now)), sleep=lambda s: None)


class Ran:
    kind = "ok"

    def __init__(self, item):
        self.result = item

    def describe(self):
        return "ok"


class Stand:
    """A started child stand-in: what rounds() and the pipeline do with launch.Started."""

    def __init__(self, log, item, round_no, slot):
        self.item, self.round_no, self.slot, self.log, self.t0 = item, round_no, slot, log, 0.0
        log.append(("start", item, round_no, slot.gate.wait is not None))

    def outcome(self):
        self.log.append(("ran", self.item, self.round_no))
        Path(self.slot.gate.release).touch()
        return Ran(self.item)

    def cancel(self):
        self.log.append(("cancelled", self.item, self.round_no))
        Path(self.slot.gate.release).touch()


def test_rounds_prepare_each_next_child_ahead_and_stop_one_the_rounds_no_longer_need(monkeypatch):
    monkeypatch.setattr(pipeline, "spare_cores", lambda cpus: [0])
    log = []
    pipe = pipeline.Pipeline(lambda item, n, slot: Stand(log, item, n, slot), [1])
    counter = launch.Counter({"w": (4, 6)})
    done = launch.rounds(["slow", "fast"], None, 3, counter, "w", lambda v, n: f"{v} {n}",
                         stop=lambda n, d: "decided" if n == 2 else None, pipeline=pipe)
    assert done.stopped == "decided"
    ran = [e[1:] for e in log if e[0] == "ran"]
    assert ran == [("slow", 1), ("fast", 1), ("fast", 2), ("slow", 2)]
    starts = [e for e in log if e[0] == "start"]
    assert starts[0] == ("start", "slow", 1, False) and all(s[3] for s in starts[1:])  # each waits on the one before
    # the next round's first child was prepared while round 2 ended; round 3 never came: it was stopped
    assert log[-1] == ("cancelled", "slow", 3)
    assert not pipe.folder.exists()


def test_a_pipeline_is_wanted_only_with_a_fork_server_and_a_core_to_spare(monkeypatch):
    monkeypatch.setenv(env.ZYGOTE_ENV, "/tmp/socket")
    monkeypatch.setattr(env, "cpu_set", lambda: [0, 1, 2, 3])
    assert pipeline.wanted([1, 2, 3]) is None and pipeline.spare_cores([1, 2, 3]) == [0]
    assert "no core to spare" in pipeline.wanted([0, 1, 2, 3])
    monkeypatch.setenv(env.PIPELINE_ENV, "0")
    assert pipeline.wanted([1, 2, 3]) == f"{env.PIPELINE_ENV}=0"
    monkeypatch.delenv(env.PIPELINE_ENV)
    monkeypatch.delenv(env.ZYGOTE_ENV)
    assert "fresh interpreter" in pipeline.wanted([1, 2, 3])


def test_the_handoffs_are_the_gaps_between_device_spans_in_start_order():
    runs = [(100.0, {"setup": 0.5, "flop count": 3.0}),  # device work 100.5-103.0
            (101.0, {"setup": 0.1, "ready": 0.5, "gate": 2.1, "flop count": 4.0}),  # 103.1-105.0
            (104.0, {"setup": 0.1, "gate": 1.0, "timed": 2.0})]  # 105.0-106.0
    assert timeline.handoffs(runs) == [0.1, 0.0]


def test_a_spare_core_is_a_whole_physical_core_apart_from_the_measured_ones(tmp_path, monkeypatch):
    """cpu0's other hardware thread is cpu2, a measured one: cpu0 is not spare; cpu1's sibling cpu3 is
    not measured either, so cpu1 is."""
    for cpu, threads in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(threads + "\n")
    monkeypatch.setattr(env, "cpu_set", lambda: [0, 1, 2, 3])
    assert pipeline.spare_cores([2, 3], tmp_path) == []
    assert pipeline.spare_cores([2], tmp_path) == [1, 3]
    assert pipeline.siblings(5, tmp_path) == {5}  # the system does not say: itself alone


def test_a_gpu_that_takes_one_process_at_a_time_is_never_pipelined(monkeypatch):
    import sys
    import types

    nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
                                 nvmlDeviceGetHandleByIndex=lambda i: i, NVML_COMPUTEMODE_DEFAULT=0,
                                 nvmlDeviceGetComputeMode=lambda h: 3)  # EXCLUSIVE_PROCESS
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv(env.ZYGOTE_ENV, "/tmp/socket")
    monkeypatch.setattr(pipeline, "spare_cores", lambda cpus: [0])
    assert "one process at a time" in pipeline.wanted([1], cuda=True)
    nvml.nvmlDeviceGetComputeMode = lambda h: 0
    assert pipeline.wanted([1], cuda=True) is None


def test_a_pipelined_cold_start_counts_no_wait_and_its_siblings_are_no_other_process(tmp_path, monkeypatch):
    from common.analysis import coldstart
    from common.analysis.results_run import RunResult
    from common.measure.gpu_monitor import GpuMonitor

    r = RunResult.__new__(RunResult)
    r.timeline = {"imports": 0.0, "setup": 0.1, "ready": 0.6, "gate": 5.6, "first step": 7.0}
    assert coldstart.first_step_s(r) == pytest.approx(2.0)  # 7.0 less the 5 s it waited for the one before
    g = env.Gate(wait=None, release=str(tmp_path / "2.done"), runner=os.getpid(), cpus=[])
    (tmp_path / "1.pid").write_text("4242")
    (tmp_path / "3.pid").write_text("4343")
    monitor = GpuMonitor.__new__(GpuMonitor)
    monitor.samples = [{"t": 0.0, "gpu_util": 90, "mem_util": 10, "mem_used_mb": 1000.0, "temp_c": 50, "power_w": 100,
                        "power_limit_w": 300, "sm_clock_mhz": 1500, "mem_clock_mhz": 2000, "pstate": 0,
                        "throttle_mask": 0, "other_pids": [4242, 4343, 5000]}]
    monitor.notice = None
    said = monitor.report(gate.siblings(g))
    assert said.other_pids == [5000] and said.warnings == ["other processes on the GPU during the run: pid 5000"]


def test_the_gate_opens_only_once_the_cuda_allocators_cache_is_given_back(tmp_path, monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    g = env.Gate(wait=None, release=str(tmp_path / "1.done"), runner=os.getpid(), cpus=[])
    gate.release(g, torch.device("cuda", 0))
    assert calls == ["synchronize", "empty_cache"] and (tmp_path / "1.done").exists()


def test_a_preparing_process_on_cuda_creates_its_context_by_a_synchronize_and_says_its_pid(tmp_path, monkeypatch):
    """On a GPU the preparation is torch.cuda.synchronize (the context, no kernel) after the pid file the
    others' GPU monitors read; on a CPU nothing but the pid file."""
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    g = env.Gate(wait=None, release=str(tmp_path / "1.done"), runner=os.getpid(), cpus=[])
    gate.prepare(g, torch.device("cpu"))
    assert calls == [] and (tmp_path / "1.pid").read_text() == str(os.getpid())
    gate.prepare(g, torch.device("cuda", 0))
    assert calls == [torch.device("cuda", 0)]
