"""What would mislead on a GPU, checked on a CPU: the timed stretch sized from a warm-up step that
records a CUDA graph, a hand capture's cost reported nowhere, and cuDNN's out-of-memory errors in
other words under a memory cap."""
import math
import types

import pytest
import torch

from common import graphs, harness
from common.analysis import aggregate, stats
from common.analysis.results_compare import Comparison, WorkloadComparison
from common.measure import process, stages
from common.render import report

from conftest import REPO
from tests_helpers import run_result

FAST = str(REPO / "recipes" / "cuda_graphs" / "churn_fast.py")


def _start(tmp_path, *flags):
    return harness.start(FAST, None, ["--device", "cpu", "--profile-steps", "0", "--data", "synthetic",
                                      "--out", str(tmp_path / "r.json"), *flags])


def test_the_timed_stretch_is_sized_from_the_warm_up_steps_pace(tmp_path, monkeypatch):
    """Warm-up steps of 5 s (compilation), 50 ms (torch.compile's mode="reduce-overhead" recording
    its CUDA graph) and then 1 ms each: 1 s of timed steps is 1000 steps of 1 ms, not the 76 that
    the mean of steps 2..5 (13 ms) would give."""
    clock = [100.0]
    monkeypatch.setattr(stages, "time", types.SimpleNamespace(perf_counter=lambda: clock[0], time=lambda: clock[0]))
    run = _start(tmp_path, "--warmup", "5", "--steps", "10", "--min-time", "1")
    try:
        stage = stages.warm_up(iter(range(100)).__next__, run.device, run.warmup, run._phases.ranges, 0.0)
        next(stage)  # the first warm-up batch
        warm = None
        for seconds in (5.0, 0.05, 0.001, 0.001, 0.001):  # the script's step, then it asks for the next batch
            clock[0] += seconds
            try:
                stage.send(None)
            except StopIteration as done:
                warm = done.value
        assert warm is not None and warm.steps == 5
        assert warm.first_step_s == pytest.approx(5.0)
        assert warm.wall_s == pytest.approx(5.053)
        assert warm.step_s == pytest.approx(0.001)
        timed_steps = stages.timed_steps(warm, run.steps, run.config.min_time_s)
        assert timed_steps == 1000
        mean = (0.05 + 3 * 0.001) / 4
        assert timed_steps > 10 * math.ceil(1 / mean)  # what the mean gave
    finally:
        run.close()


def test_the_warm_up_waits_for_each_step_and_the_timed_loop_for_none():
    """A sync per warm-up step (untimed) is allowed; the timed loop reads its timers once, after it."""
    import inspect

    warm, timed = inspect.getsource(stages.warm_up), inspect.getsource(stages.timed)
    assert "synchronize(device)  # note: this is a sync point" in warm
    loop = timed[timed.index("for i in range(n)"):timed.index("step_ms = timer.step_ms()")]
    assert "synchronize" not in loop and ".item()" not in loop


def test_a_cpu_capture_records_its_setup_time_and_the_report_renders_it(tmp_path):
    run = _start(tmp_path, "--smoke")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.zeros(run.batch_size, 4)

    def step():
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    graph, out = graphs.capture(step, model, optimizer, run)
    assert (graph, out) == (None, None)
    assert run.stage == "setup"  # put back after the capture
    for _ in run.loop(range(100)):  # the step reads its static input, as a replayed graph does
        run.log_loss(step())
    with pytest.raises(RuntimeError, match="before run.loop"):  # inside the loop its syncs would be timed
        with run.setup("late"):
            pass
    result = run.finish()
    seconds = result.compile.setup_s["graph capture"]
    assert seconds >= 0 and result.compile.graphs is None  # no torch.compile in this run
    assert result.timing.first_step_s >= seconds and result.timing.warmup_s >= seconds  # counted in both
    assert "graph capture" in harness.summary(result, run.out)
    assert any("CUDA graphs need CUDA" in n for n in result.notices)

    slow = run_result(variant="slow")
    fast = run_result(variant="fast")
    fast.compile, fast.notices = result.compile, result.notices
    entry = WorkloadComparison(slow=aggregate.aggregate([slow]), fast=aggregate.aggregate([fast]))
    entry.speedup = stats.speedup(entry.slow.process_ms, entry.fast.process_ms)
    entry.parity = aggregate.parity(slow, fast, {"early_steps": 5, "early_rtol": 0.01, "window": 10, "rtol": 0.05})
    comparison = Comparison(recipe="cuda_graphs", title="CUDA graphs", evidence_keys=[], smoke=True, device="cpu",
                            command="x", results_dir="r", workloads={"churn": entry}, failures=[])
    md = report.render_markdown(comparison, tmp_path)
    line = next(t for t in md.splitlines() if t.startswith("- Graph capture (fast twin)"))
    assert f"{seconds:.3f} s before the timed loop" in line and "first-step (0.05 s)" in line
    assert "torch.compile (fast twin)" not in md  # no compile figures made up from a capture


def test_a_setup_that_fails_reports_its_own_stage(tmp_path):
    run = _start(tmp_path, "--smoke")
    try:
        with pytest.raises(ValueError), run.setup("graph capture"):
            raise ValueError("boom")
        assert run.stage == "graph capture"  # an out-of-memory result written now names it
    finally:
        run.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_a_cuda_capture_takes_measurable_time(tmp_path):
    run = harness.start(FAST, None, ["--device", "cuda", "--smoke", "--profile-steps", "0", "--data", "synthetic",
                                     "--out", str(tmp_path / "r.json")])
    try:
        model = torch.nn.Linear(8, 1).cuda()
        x = torch.zeros(16, 8, device="cuda")
        graph, out = graphs.capture(lambda: model(x), model, run=run)
        assert graph is not None and run.measured.setup_s["graph capture"] > 0
    finally:
        run.close()


OOM = [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA error: out of memory"),
    RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED"),
]
UNDER_A_CAP = [
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                 "non-contiguous input."),
    RuntimeError("GET was unable to find an engine to execute this computation"),
    RuntimeError("FIND was unable to find an engine to execute this computation"),
    RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"),
]
NOT_OOM = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x2)"),
    RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"),
    ValueError("out of memory"),  # not an error torch raises for it
    KeyError("CUDNN_STATUS_ALLOC_FAILED"),
]


@pytest.mark.parametrize("exc", OOM, ids=str)
def test_out_of_memory_in_the_libraries_words_is_out_of_memory(exc):
    assert harness.is_oom(exc) and harness.is_oom(exc, capped=True)


@pytest.mark.parametrize("exc", UNDER_A_CAP, ids=str)
def test_no_engine_is_out_of_memory_only_under_a_memory_cap(exc):
    assert harness.is_oom(exc, capped=True)
    assert not harness.is_oom(exc)  # without a cap: a configuration cuDNN does not support


@pytest.mark.parametrize("exc", NOT_OOM, ids=str)
def test_other_errors_are_not_out_of_memory(exc):
    assert not harness.is_oom(exc) and not harness.is_oom(exc, capped=True)


def test_the_hook_asks_with_the_run_s_memory_cap(tmp_path, monkeypatch):
    """A capped run writes an out-of-memory result for cuDNN's "no engine"; an uncapped one keeps the trace."""
    run = _start(tmp_path, "--smoke")
    try:
        hooks = process.Hooks("x")
        hooks.run = run
        written = []
        monkeypatch.setattr(run, "write_oom", written.append)
        monkeypatch.setattr(harness.sys, "__excepthook__", lambda *a: written.append("trace"))
        exc = RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED ... unable to find an engine")
        hooks.uncaught(RuntimeError, exc, None)
        assert written == ["trace"]
        run.memory_cap_gb = 4.0  # as memory.cap sets it on a GPU
        with pytest.raises(SystemExit) as ended:
            hooks.uncaught(RuntimeError, exc, None)
        assert ended.value.code == harness.EXIT_OOM and written[-1] is exc
    finally:
        run.close()


def test_the_allocators_history_records_python_stacks_only(monkeypatch):
    """Where a profiled run records the CUDA allocator's history (--memory-snapshot) and where the doctor's
    OOM rerun does: torch's default stacks add C++ frames, whose symbolizing made a dump take minutes."""
    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(kw))
    from common.measure import memory

    memory.record_history()
    assert calls == [{"max_entries": memory.HISTORY_ENTRIES, "stacks": "python"}]
    import inspect

    assert "memory.record_history()" in inspect.getsource(stages.profiled)  # the profiled stage's one call
    assert "_record_memory_history(max_entries" not in inspect.getsource(stages)


class _Event:
    """A CUDA event's stand-in: the GPU's time when it was reached, in seconds."""

    def __init__(self, t):
        self.t = t

    def elapsed_time(self, other):
        return (other.t - self.t) * 1000.0


def test_on_cuda_the_figure_is_the_events_first_start_to_last_end_and_the_fetch_is_the_gpus_wait(monkeypatch):
    """The CUDA branches of StepTimer.stretch_ms and stages.fetch_ms, with stand-in events: a stretch of
    steps alternating 4 and 128 ms, the GPU idle 1 ms between steps (waiting on the host), whose figure
    spans whole periods and counts those gaps; its fetch times are the events' (the GPU's wait), not the host's."""
    from common.measure.timing import DataTimer, StepTimer

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    steps = [4.0, 128.0] * 12 + [4.0]
    timer, t = StepTimer(torch.device("cpu"), len(steps)), 0.0
    timer.cuda, timer.starts, timer.ends = True, [], []
    for ms in steps:
        timer.starts.append(_Event(t))
        t += ms / 1000
        timer.ends.append(_Event(t))
        t += 0.001
    assert timer.step_ms() == pytest.approx(steps)
    fig = stages.figure(steps, timer, batch_size=16)
    assert fig.whole_steps == 24 and fig.summary.mean_ms == pytest.approx((24 * 66 + 23) / 24)
    data = DataTimer(torch.device("cpu"), len(steps))
    data.host = [0.05] * len(steps)  # the host blocked 50 ms in each fetch on a full launch queue
    assert stages.fetch_ms(data) == pytest.approx([50.0] * len(steps))  # a CPU: the host's time
    data.cuda = True
    data.before = [_Event(s.t) for s in timer.starts]
    data.after = [_Event(s.t + (0.120 if i % 2 else 0.0005)) for i, s in enumerate(timer.starts)]
    waited = stages.fetch_ms(data)
    assert waited[:2] == pytest.approx([0.5, 120.0])  # on CUDA the GPU's wait across the fetch
    found = stages.figure(steps, timer, 16, {"data": waited}, workers=2).bursts
    assert found.period == 2 and found.cause == "loader workers"
