"""The doctor on a script that runs out of memory: a report of where, the allocator's figures at the
failure, the snapshot of its history (CUDA: the doctor's second run records it from the start) and the
recipes that cut memory. On the CPU a real host out-of-memory end to end; CUDA's allocator, its
out-of-memory observer and the second run through stand-ins."""
import pickle
from pathlib import Path

import pytest
import torch
from test_doctor import PLAIN, doctor

from common.analysis.results import read_result, write_result
from common.analysis.results_run import OutOfMemory, oom_path
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
    """CUDA's caching allocator as the observer and the OOM recorder see it: CUDA's lazy initialisation
    (the calls queued until the script's first CUDA use), the out-of-memory observer it calls before
    raising, its history recording, its snapshot and its statistics."""

    def __init__(self, monkeypatch, backend="native"):
        self.queued, self.observers, self.recording, self.initialised = [], [], [], False
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialised)
        monkeypatch.setattr(torch.cuda, "_lazy_call",
                            lambda f, **kw: f() if self.initialised else self.queued.append(f))
        monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: backend)
        monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", self.observers.append, raising=False)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                            lambda enabled="all", **kw: self.recording.append((enabled, kw)))
        self.snapshot = {"segments": ["as the error reached us"], "allocator_settings": {"expandable_segments": False}}
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: self.snapshot)
        self.stats = {"allocated_bytes.all.current": 70 * 2**30, "reserved_bytes.all.current": 78 * 2**30,
                      "inactive_split_bytes.all.current": 6 * 2**30,
                      "inactive_split_bytes.large_pool.current": 5 * 2**30}
        monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: self.stats)

    def initialise(self):  # the script's first CUDA use: torch.cuda._lazy_init runs the queued calls
        self.initialised = True
        for f in self.queued:
            f()

    def run_out(self, requested=4 * 2**30):
        for observe in self.observers:  # as c10 does: (device, bytes it tried to reserve, may use, CUDA's free)
            observe(0, requested, 80 * 2**30, 2**30)
        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {requested / 2**30:.2f} GiB.")


def test_the_recorder_starts_with_cuda_keeps_the_last_failure_and_dumps_at_the_error(tmp_path, monkeypatch):
    fake = FakeAllocator(monkeypatch)
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    assert fake.recording == [] and not fake.observers  # CUDA untouched before the script's own first use
    fake.initialise()
    assert fake.recording == [("all", {"max_entries": memory.OomRecorder.MAX_ENTRIES, "stacks": "python"})]
    for requested in (4 * 2**30, 2**30):  # a cuDNN workspace that halves and retries; the last one ends it
        with pytest.raises(torch.cuda.OutOfMemoryError):
            fake.run_out(requested)
    assert recorder.failures == 2 and recorder.seen["requested"] == 2**30 and recorder.seen["allocated"] == 70 * 2**30
    assert not (tmp_path / "oom.pickle").exists()  # nothing written inside the failing allocation
    assert recorder.at_error() == str(tmp_path / "oom.pickle")
    assert pickle.loads((tmp_path / "oom.pickle").read_bytes()) == fake.snapshot
    assert fake.recording[-1] == (None, {})  # recording off once the snapshot is written


def test_an_observer_that_fails_never_replaces_the_scripts_oom(tmp_path, monkeypatch):
    fake = FakeAllocator(monkeypatch)
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    fake.initialise()
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: 1 / 0)
    with pytest.raises(torch.cuda.OutOfMemoryError):  # the script's error, not the observer's
        fake.run_out()
    assert recorder.seen is None and "ZeroDivisionError" in recorder.observer_failed and recorder.at_error()


@pytest.mark.parametrize("case", ["cudaMallocAsync", "raises", "no CUDA use"])
def test_where_no_history_can_be_recorded_the_recorder_says_why_and_the_script_runs_on(case, tmp_path, monkeypatch):
    fake = FakeAllocator(monkeypatch, backend="cudaMallocAsync" if case == "cudaMallocAsync" else "native")
    if case == "raises":
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: 1 / 0)
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    if case != "no CUDA use":
        fake.initialise()  # an error here would be the script's DeferredCudaCallError: none leaves
    assert recorder.at_error() is None and not (tmp_path / "oom.pickle").exists()
    said = {"cudaMallocAsync": "the allocator is cudaMallocAsync", "raises": "ZeroDivisionError",
            "no CUDA use": "before it used CUDA"}[case]
    assert said in recorder.unavailable


def test_the_observer_reads_the_failure_as_the_allocator_saw_it(tmp_path, monkeypatch):
    from common.measure import observer

    fake = FakeAllocator(monkeypatch)
    monkeypatch.setattr(memory, "figures_at_error", lambda message: pytest.fail("read from the allocator's observer"))
    monkeypatch.setattr(observer.stamp, "take", lambda device: stamp("cuda"))
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    fake.initialise()
    obs = observer.Observer.__new__(observer.Observer)
    obs.stage, obs.ends, obs.device = "warm-up", 3, torch.device("cuda")
    try:
        fake.run_out()
    except torch.cuda.OutOfMemoryError as e:
        found = obs.out_of_memory(e, recorder)
    assert found.device == "cuda" and found.at_failure and found.stage == "warm-up" and found.steps_seen == 3
    # a 4 GiB request is the large pool's: its split blocks' free memory, not the small pool's as well
    assert (found.requested_mb, found.allocated_mb, found.reserved_mb, found.inactive_split_mb, found.free_mb,
            found.allowed_mb) == (4096, 70 * 1024, 78 * 1024, 5 * 1024, 1024, 80 * 1024)
    assert found.snapshot == str(tmp_path / "oom.pickle") and "_memory_viz trace_plot" in found.view_snapshot
    assert not found.expandable_segments


def test_the_snapshot_is_written_first_and_survives_figures_a_broken_context_cannot_give(tmp_path, monkeypatch):
    """A CUDA context the error broke fails every figure; the snapshot (host-side) is written before them.
    Expandable segments are read from the allocator's own settings, which a script may set in code."""
    from common.measure import observer

    fake = FakeAllocator(monkeypatch)
    fake.snapshot["allocator_settings"]["expandable_segments"] = True
    monkeypatch.setattr(observer.stamp, "take", lambda device: stamp("cpu") if device.type == "cpu" else 1 / 0)
    recorder = memory.OomRecorder(tmp_path / "oom.pickle")
    fake.initialise()
    obs = observer.Observer.__new__(observer.Observer)
    obs.stage, obs.ends, obs.device = "timed steps", 9, torch.device("cuda")
    found = obs.out_of_memory(RuntimeError("CUDA error: out of memory"), recorder)
    assert found.snapshot == str(tmp_path / "oom.pickle") and found.allocated_mb is None
    assert any("figures could not be read (ZeroDivisionError" in n for n in found.notes)
    assert memory.expandable_segments(recorder) and not memory.expandable_segments(None)


def test_without_the_observer_the_figures_are_read_on_the_gpu_the_error_names(monkeypatch):
    fake = FakeAllocator(monkeypatch)
    fake.initialise()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("the message names the GPU"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device: 0.5)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("P", (), {"total_memory": 80 * 2**30}))
    seen = memory.figures_at_error("CUDA out of memory. Tried to allocate 20.00 MiB. "
                                   "GPU 1 has a total capacity of 79 GiB")
    assert seen["device"] == 1 and seen["allowed"] == 40 * 2**30 and seen["requested"] is None


@pytest.mark.parametrize("message,exc,device", [
    ("CUDA out of memory. Tried to allocate 2.00 GiB.", torch.OutOfMemoryError, "cuda"),
    ("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", RuntimeError, "cuda"),
    ("cuFFT error: CUFFT_ALLOC_FAILED", RuntimeError, "cuda"),
    ("Triton Error [CUDA]: out of memory", RuntimeError, "cuda"),
    ("CUDA driver error: out of memory", RuntimeError, "cuda"),
    ("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory", RuntimeError, "cpu"),
    ("MPS backend out of memory (MPS allocated: 17.00 GB)", torch.OutOfMemoryError, "other"),
])
def test_which_memory_ran_out_is_read_from_the_error(message, exc, device):
    from common.measure.process import is_oom, oom_device

    assert is_oom(exc(message)) and oom_device(exc(message), message) == device


def test_the_kernels_oom_kills_are_counted_from_vmstat(tmp_path):
    from common.runners import launch

    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 5\noom_kill 7\n")
    assert launch.oom_kills(vmstat) == 7 and launch.oom_kills(tmp_path / "none") is None


def _oom(**kw) -> OutOfMemory:
    return OutOfMemory(env=stamp("cuda"), device="cuda", stage="warm-up", steps_seen=3,
                       message="CUDA out of memory. Tried to allocate 4.00 GiB.", **kw)


@pytest.mark.parametrize("second", ["oom", "fits", "cut"])
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
                                             inactive_split_mb=9 * 1024.0, free_mb=512.0, allowed_mb=80 * 1024.0,
                                             at_failure=True,
                                             snapshot=str(snapshot), view_snapshot=memory.how_to_view(snapshot)))
        assert kw["timeout"] == 120.0  # 3x the first run's 10 s, at least two minutes
        return launch.Outcome({"oom": "oom", "fits": "ok", "cut": "cut"}[second], None, 1.0,
                              Path(out).with_suffix(".log"), EXIT_OOM if second == "oom" else 0, [])

    monkeypatch.setattr(launch, "cuda_available", lambda: True)
    monkeypatch.setattr(launch, "child", child)
    flags = ["--warmup", "5", "--trace-dir", "t", "--", str(PLAIN / "runs_out_of_memory.py")]
    assert runner.out_of_memory(["x.py"], flags, out_dir, tmp_path, None, 10.0) == EXIT_OOM
    (sent,) = calls
    assert sent[:2] == ["--warmup", "5"] and sent[sent.index("--") + 1] == str(PLAIN / "runs_out_of_memory.py")
    text = next(tmp_path.glob("doctor_runs_out_of_memory_*.md")).read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "## The device's memory at the failure" in text
    kept = read_result(out_dir / "oom.json", OutOfMemory, "test")
    if second == "oom":
        assert kept.snapshot and "oom_memory_snapshot.pickle" in text and "as the allocator last failed" in text
        assert "| the segment the allocator tried to reserve (the request, rounded up) | 4.00 GiB |" in text
        assert "9.00 GiB were free inside split blocks, more than the request" in text  # likely fragmentation
    else:
        assert kept.snapshot is None and "as the error reached" in text
        assert ("did not run out of memory" if second == "fits" else "(3x the first run's time)") in text


def test_a_rank_of_a_distributed_run_is_not_run_again_alone(tmp_path, monkeypatch):
    from common.runners import doctor as runner
    from common.runners import launch

    out_dir = tmp_path / "doctor"
    out_dir.mkdir()
    write_result(oom_path(out_dir / "observation.json"), _oom())
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(launch, "cuda_available", lambda: True)
    monkeypatch.setattr(launch, "child", lambda *a, **kw: pytest.fail("a lone rank would wait for the others"))
    flags = ["--", str(PLAIN / "runs_out_of_memory.py")]
    assert runner.out_of_memory(["x.py"], flags, out_dir, tmp_path, None, 10.0) == EXIT_OOM
    assert "a rank of a distributed run (WORLD_SIZE set)" in next(tmp_path.glob("doctor_*.md")).read_text()


@pytest.mark.parametrize("kills,said", [((3, 4), "the kernel's out-of-memory killer ran while it did "
                                                  "(/proc/vmstat oom_kill 3 -> 4)"),
                                         ((3, 3), "on Linux most often the kernel's out-of-memory killer")])
def test_a_script_killed_by_sigkill_is_said_as_the_kernels_oom_killer(kills, said, tmp_path, monkeypatch, capsys):
    """A host out of memory ends the script by SIGKILL, not an exception: said from the exit status, and
    as the OOM killer's work where /proc/vmstat's count rose during the run."""
    from common.runners import doctor as runner
    from common.runners import launch

    counts = iter(kills)
    monkeypatch.setattr(launch, "oom_kills", lambda: next(counts))
    monkeypatch.setattr(launch, "ensure_ceiling", lambda cuda: None)
    monkeypatch.setattr(launch, "child", lambda target, flags, out, **kw: launch.Outcome(
        "failed", None, 3.0, Path(out).with_suffix(".log"), -9, ["Killed"]))
    assert runner.main([str(PLAIN / "runs_out_of_memory.py"), "--reports-dir", str(tmp_path)]) == -9
    err = capsys.readouterr().err
    assert "doctor: the script was killed (SIGKILL)" in err and said in err and "no report written" in err
    assert not list(tmp_path.glob("doctor_*.md"))
