"""The doctor on a script that runs out of memory: a report of where, the allocator's figures at the
failure, the snapshot of its history (CUDA: the doctor's second run records it from the start) and the
recipes that cut memory. On the CPU a real host out-of-memory end to end; CUDA's allocator, its
out-of-memory observer and the second run through stand-ins."""
import pickle
from pathlib import Path

import pytest
import torch
from test_doctor import PLAIN, doctor

from common.analysis.results import OutOfMemory, oom_path, read_result, write_result
from common.errors import EXIT_OOM
from common.measure import memory

from tests_helpers import stamp


def test_a_script_that_runs_out_of_host_memory_gets_a_report_of_where_and_what_cuts_memory(tmp_path):
    proc = doctor(tmp_path, PLAIN / "runs_out_of_memory.py", "--warmup", "5", ok=False)
    assert proc.returncode == EXIT_OOM, proc.stdout + proc.stderr
    assert "DefaultCPUAllocator: can't allocate memory" in proc.stdout  # the script's own traceback
    assert "Headline: the script ran out of the host's memory in its warm-up (after 3 steps)" in proc.stdout
    (md,) = tmp_path.glob("doctor_runs_out_of_memory_*.md")
    text = md.read_text()
    assert "ran out of memory" in text.splitlines()[0] and "CPU:" in text and "(not a GPU result)" in text
    assert "a memory snapshot records CUDA's caching allocator" in text  # why none, in one line
    for recipe in ("checkpointing", "amp", "grad_accumulation"):
        assert f"[`{recipe}`]" in text
    assert "## The device's memory at the failure" not in text  # no CUDA figures to show


class FakeAllocator:
    """CUDA's caching allocator as the observer and the OOM recorder see it: the out-of-memory observer
    it calls before raising, its history recording, its snapshot and its statistics."""

    def __init__(self, monkeypatch):
        self.observers, self.recording = [], []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", self.observers.append, raising=False)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                            lambda enabled="all", **kw: self.recording.append((enabled, kw)))
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: {"segments": ["live at the failure"]})
        for name, value in (("memory_allocated", 70 * 2**30), ("memory_reserved", 78 * 2**30)):
            monkeypatch.setattr(torch.cuda, name, lambda device=None, v=value: v)

    def run_out(self, requested=4 * 2**30):
        for observe in self.observers:  # as c10 does: (device, bytes asked, bytes it may use, CUDA's free)
            observe(0, requested, 80 * 2**30, 2**30)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB.")


def test_the_recorder_dumps_the_allocators_history_at_the_first_oom_and_stops_recording(tmp_path, monkeypatch):
    fake = FakeAllocator(monkeypatch)
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    assert fake.recording == [("all", {"max_entries": memory.OomRecorder.MAX_ENTRIES})] and fake.observers
    with pytest.raises(torch.cuda.OutOfMemoryError):
        fake.run_out()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        fake.run_out(requested=2**30)  # a script that retries smaller: the first failure is the one kept
    assert recorder.seen["requested"] == 4 * 2**30 and recorder.seen["allocated"] == 70 * 2**30
    assert recorder.at_error() == str(tmp_path / "oom.pickle")
    assert pickle.loads((tmp_path / "oom.pickle").read_bytes()) == {"segments": ["live at the failure"]}
    assert fake.recording[-1] == (None, {})  # recording off once the snapshot is written


def test_an_oom_the_allocator_did_not_raise_is_dumped_where_the_error_is_caught(tmp_path, monkeypatch):
    FakeAllocator(monkeypatch)  # a cuBLAS workspace, say: the observer never runs
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    assert recorder.seen is None and recorder.at_error() and (tmp_path / "oom.pickle").is_file()


def test_the_observer_reads_the_failure_as_the_allocator_saw_it(tmp_path, monkeypatch):
    from common.measure import observer

    fake = FakeAllocator(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: pytest.fail("read from the observer"))
    monkeypatch.setattr(observer.stamp, "take", lambda device: stamp("cuda"))
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    obs = observer.Observer.__new__(observer.Observer)
    obs.stage, obs.ends, obs.device = "warm-up", 3, torch.device("cuda")
    try:
        fake.run_out()
    except torch.cuda.OutOfMemoryError as e:
        found = obs.out_of_memory(e, recorder)
    assert found.device == "cuda" and found.at_failure and found.stage == "warm-up" and found.steps_seen == 3
    assert (found.requested_mb, found.allocated_mb, found.reserved_mb, found.free_mb, found.allowed_mb) == (
        4096, 70 * 1024, 78 * 1024, 1024, 80 * 1024)
    assert found.snapshot == str(tmp_path / "oom.pickle") and "_memory_viz trace_plot" in found.view_snapshot


def _oom(**kw) -> OutOfMemory:
    return OutOfMemory(env=stamp("cuda"), device="cuda", stage="warm-up", steps_seen=3,
                       message="CUDA out of memory. Tried to allocate 4.00 GiB.", **kw)


@pytest.mark.parametrize("second", ["oom", "fits"])
def test_on_cuda_the_doctor_runs_the_script_again_recording_and_reports_the_snapshot(second, tmp_path, monkeypatch):
    """The first run's OOM (figures as the error reached the doctor); the second run, its flags with
    --oom-snapshot, gives the snapshot; a second run that fits says so instead."""
    from common.runners import doctor as runner
    from common.runners import launch

    out_dir = tmp_path / "doctor"
    out_dir.mkdir()
    write_result(oom_path(out_dir / "observation.json"), _oom(allocated_mb=70 * 1024.0, reserved_mb=79 * 1024.0))
    calls = []

    def child(target, flags, out, **kw):
        calls.append(flags)
        snapshot = Path(flags[flags.index("--oom-snapshot") + 1])
        if second == "oom":
            snapshot.write_bytes(b"snapshot")
            write_result(oom_path(out), _oom(requested_mb=4096.0, allocated_mb=70 * 1024.0, reserved_mb=79 * 1024.0,
                                             free_mb=512.0, allowed_mb=80 * 1024.0, at_failure=True,
                                             snapshot=str(snapshot), view_snapshot=memory.how_to_view(snapshot)))
        return launch.Outcome("oom" if second == "oom" else "ok", None, 1.0, Path(out).with_suffix(".log"),
                              EXIT_OOM if second == "oom" else 0, [])

    monkeypatch.setattr(launch, "cuda_available", lambda: True)
    monkeypatch.setattr(launch, "child", child)
    flags = ["--warmup", "5", "--trace-dir", "t", "--", str(PLAIN / "runs_out_of_memory.py")]
    assert runner.out_of_memory(["x.py"], flags, out_dir, tmp_path, None) == EXIT_OOM
    (sent,) = calls
    assert sent[:2] == ["--warmup", "5"] and sent[sent.index("--") + 1] == str(PLAIN / "runs_out_of_memory.py")
    text = next(tmp_path.glob("doctor_runs_out_of_memory_*.md")).read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "## The device's memory at the failure" in text
    kept = read_result(out_dir / "oom.json", OutOfMemory, "test")
    if second == "oom":
        assert kept.snapshot and "oom_memory_snapshot.pickle" in text and "as the allocator failed" in text
        assert "| the allocation that failed | 4.00 GiB |" in text
        assert "9.00 GiB were held by the allocator but free, more than the request" in text  # 79 - 70 > 4
    else:
        assert kept.snapshot is None and "did not run out of memory" in text and "as the error reached" in text
