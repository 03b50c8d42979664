"""What only a GPU machine would show, checked on a CPU with stand-ins: gpu-check's own tests and its
timeouts, the NVML handle of the GPU torch uses, the doctor's kept losses, and the timers, peaks and
memory timeline of a run on cuda:1."""
import ast
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from common.measure import gpu_monitor, memory, observer, profiling, timing
from common.runners import checks

from conftest import REPO

# --- make gpu-check ---------------------------------------------------------------------------------

def _named_tests() -> set[str]:
    """Every tests/....py (or tests/....py::name) a runner names, GPU_TESTS included."""
    named = set(checks.GPU_TESTS)
    for path in (REPO / "common" / "runners").glob("*.py"):
        named |= set(re.findall(r"tests/[\w/]+\.py(?:::\w+)?", path.read_text()))
    return named


def test_every_test_a_runner_names_exists():
    for name in sorted(_named_tests()):
        file, _, test = name.partition("::")
        assert (REPO / file).is_file(), f"{name}: no such file"
        if test:
            tree = ast.parse((REPO / file).read_text())
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert test in defined, f"{name}: no such test in {file}"
    # the check's tests never start the check again
    assert not {name.partition("::")[0] for name in checks.GPU_TESTS} & {"tests/integration/test_gpucheck.py",
                                                                          "tests/integration/test_gpu_defects.py"}


@pytest.mark.xdist_group("tour-lock")  # a check as a process takes the checkout's tour lock
def test_the_checks_tests_target_passes_at_cpu_sizes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "common.runners.tour", "--check", "--smoke", "--only", "tests",
                           "--bundle", str(tmp_path / "bundle")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=os.environ)  # conftest's COOKBOOK_DATA_DIR and COOKBOOK_OFFLINE
    log = tmp_path / "checks" / "logs" / "tests.log"
    assert proc.returncode == 0, proc.stdout + proc.stderr + (log.read_text()[-3000:] if log.exists() else "")
    assert proc.stdout.splitlines()[-1] == "gpu-check: 1 of 1 ok"


# a target that starts a child, which starts a grandchild; the child writes the three pids
SPAWNS = """
import subprocess, sys, time
child = ("import os, subprocess, sys, time; g = subprocess.Popen(['sleep', '300']); "
         "open(sys.argv[1], 'w').write(f'{os.getppid()} {os.getpid()} {g.pid}'); time.sleep(300)")
subprocess.Popen([sys.executable, '-c', child, sys.argv[1]])
print('started', flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie has ended; it waits for its (new) parent to read its exit
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return stat.parent.exists()


def _pids(path: Path, within: float = 20) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) == 3:
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the target's child never wrote its pids")


def _gone(pids: list[int], within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _kill(pids: list[int]) -> None:
    for pid in pids:  # what a failed check left behind (the test started them)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_timeout_ends_the_targets_children_and_grandchildren(tmp_path):
    pid_file = tmp_path / "pids"
    target = checks.Target("spawns", ["-c", SPAWNS, str(pid_file)])
    ok, line = checks.run(target, tmp_path / "spawns.log", 2)
    pids = _pids(pid_file, within=1)
    try:
        assert not ok and "timed out after 2 s" in line
        assert "started" in (tmp_path / "spawns.log").read_text()  # its output so far, in its log
        assert _gone(pids), "the target, its child or its grandchild outlived its timeout"
    finally:
        _kill(pids)


# a torchrun rank: a grandchild in a session of its own, which the target's group signals miss
SPAWNS_A_SESSION = SPAWNS.replace("g = subprocess.Popen(['sleep', '300'])",
                                  "g = subprocess.Popen(['sleep', '300'], start_new_session=True)")


def test_a_timeout_ends_a_grandchild_that_left_the_group(tmp_path):
    pid_file = tmp_path / "pids"
    target = checks.Target("spawns", ["-c", SPAWNS_A_SESSION, str(pid_file)])
    ok, line = checks.run(target, tmp_path / "spawns.log", 2)
    pids = _pids(pid_file, within=1)
    try:
        assert not ok and "timed out after 2 s" in line
        assert _gone(pids), "a grandchild in its own session outlived the target's timeout"
    finally:
        _kill(pids)


@pytest.mark.xdist_group("tour-lock")
def test_a_kill_of_the_check_ends_its_targets(tmp_path):
    """The targets run in their own sessions, which a signal to the check's process group misses:
    the check ends them itself."""
    pid_file = tmp_path / "pids"
    code = ("import sys; from common.runners import checks, tour\n"
            f"t = checks.Target('spawns', ['-c', {SPAWNS!r}, {str(pid_file)!r}])\n"
            "checks.targets = lambda smoke, out: [t]\n"
            f"sys.exit(tour.tour(['--check', '--smoke', '--no-zygote', '--bundle', {str(tmp_path / 'b')!r}]))")
    check = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    pids = []
    try:
        pids = _pids(pid_file)
        check.send_signal(signal.SIGTERM)
        check.communicate(timeout=30)
        assert check.returncode != 0
        assert _gone(pids), "the check's target or its children outlived the check"
    finally:
        check.kill()
        check.wait()
        _kill(pids)


# --- the NVML handle ----------------------------------------------------------------------------------

class Uuid:
    """As torch's _CUuuid: the bare 8-4-4-4-12 hex, without NVML's "GPU-"."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


PHYSICAL = [  # NVML's order (PCI): uuid, (domain, bus, device)
    ("00000000-0000-0000-0000-0000000000a0", (0, 0x17, 0)),
    ("00000000-0000-0000-0000-0000000000a1", (0, 0x65, 0)),
    ("00000000-0000-0000-0000-0000000000a2", (1, 0xca, 0)),
]


class Nvml:
    """A stand-in pynvml with three GPUs: a handle is "gpu<NVML index>"."""

    def __init__(self, by_uuid=True):
        self.by_uuid = by_uuid

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"gpu{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if not self.by_uuid:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return next(f"gpu{i}" for i, (u, _) in enumerate(PHYSICAL) if f"GPU-{u}" == uuid)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        wanted = (int(domain, 16), int(bus, 16), int(device, 16))
        return next(f"gpu{i}" for i, (_, pci) in enumerate(PHYSICAL) if pci == wanted)


def _visible(monkeypatch, visible: str, current: int = 0):
    """torch as it is under CUDA_VISIBLE_DEVICES=`visible`: cuda:i is physical GPU visible[i]."""
    order = [int(v) for v in visible.split(",")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)

    def properties(i):
        uuid, (domain, bus, device) = PHYSICAL[order[i]]
        return types.SimpleNamespace(uuid=Uuid(uuid), pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)


@pytest.mark.parametrize("by_uuid", [True, False], ids=["by uuid", "by pci bus id"])
def test_the_monitor_watches_the_gpu_torch_computes_on(monkeypatch, by_uuid):
    monkeypatch.setattr(gpu_monitor, "_nvml", lambda: Nvml(by_uuid))
    _visible(monkeypatch, "2")
    mon = gpu_monitor.GpuMonitor(torch.device("cuda", 0))
    assert mon.handle == "gpu2" and mon.notice is None
    _visible(monkeypatch, "1,0", current=1)
    assert gpu_monitor.GpuMonitor(torch.device("cuda", 0)).handle == "gpu1"
    assert gpu_monitor.GpuMonitor(torch.device("cuda", 1)).handle == "gpu0"
    assert gpu_monitor.GpuMonitor(torch.device("cuda")).handle == "gpu0"  # the current device: cuda:1


def test_the_monitor_falls_back_to_the_index_with_a_notice(monkeypatch):
    def no_cuda(i):
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(gpu_monitor, "_nvml", lambda: Nvml())
    monkeypatch.setattr(torch.cuda, "get_device_properties", no_cuda)
    mon = gpu_monitor.GpuMonitor(torch.device("cuda", 1))
    assert mon.handle == "gpu1" and "found by index" in mon.notice


# --- the doctor's kept losses -------------------------------------------------------------------------

def test_a_kept_loss_is_its_value_when_kept_not_after_its_buffer_is_reused():
    """A CUDA graph's output (torch.compile's reduce-overhead) is one buffer each replay writes over."""
    obs = observer.Observer(types.SimpleNamespace(step="optimizer", fix=[]))
    loss, outputs = torch.tensor(1.0), torch.ones(2, 3)
    for value in (1.0, 2.0, 3.0):
        loss.fill_(value)
        outputs.fill_(value * 10)
        obs.keep(loss)
        obs.keep(outputs)
    loss.fill_(-1.0)
    outputs.fill_(-1.0)
    assert torch.stack([x.float() for x in obs.losses]).tolist() == [1.0, 10.0, 2.0, 20.0, 3.0, 30.0]


# --- a run on cuda:1, the current device being cuda:0 -------------------------------------------------

def _index(device) -> int:
    """torch's reading of a device argument: None, or a device without an index, is the current one."""
    if isinstance(device, int):
        return device
    device = None if device is None else torch.device(device)
    return torch.cuda.current_device() if device is None or device.index is None else device.index


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's events, streams, peaks and sync, each call logged with the device it acts on."""
    calls = []

    class Stream:
        def __init__(self, device):
            self.device_index = device

    class Event:
        def __init__(self, enable_timing=False):
            self.device = None

        def record(self, stream=None):
            stream = stream or Stream(torch.cuda.current_device())  # torch's default: the current device's
            assert self.device in (None, stream.device_index), "an event records on one device only"
            self.device = stream.device_index  # created on its first stream's device
            calls.append(("record", stream.device_index))

        def elapsed_time(self, end):
            assert self.device == end.device
            return 1.0

    def logged(name, value=0):
        def call(device=None):
            calls.append((name, _index(device)))
            return value
        return call

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(_index(device)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("reset_peak_memory_stats", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, logged(name))
    for name in ("max_memory_allocated", "max_memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, logged(name, 2**20))
    return calls


def test_the_timers_and_peaks_of_a_run_on_cuda1_are_cuda1s(fake_cuda):
    device = torch.device("cuda", 1)
    steps, data = timing.StepTimer(device, 2), timing.DataTimer(device, 2)
    phases = timing.PhaseTimer(device)
    memory.reset_peak(device)
    for i in range(2):
        steps.start(i)
        data.start(i)
        data.stop(i)
        phases.stop(i, "forward", phases.start())
        steps.stop(i)
    assert steps.step_ms() == [1.0, 1.0] and data.device_ms() == [1.0, 1.0]
    assert phases.phase_ms() == {"forward": [1.0, 1.0]}
    assert memory.peak(device).peak_mb == 1.0
    assert {name for name, _ in fake_cuda} == {"record", "reset_peak_memory_stats", "synchronize",
                                               "max_memory_allocated", "max_memory_reserved"}
    assert [call for call in fake_cuda if call[1] != 1] == []


def test_an_unnumbered_cuda_device_is_the_current_one(fake_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    memory.reset_peak(torch.device("cuda"))
    memory.peak(torch.device("cuda"))
    assert fake_cuda == [("reset_peak_memory_stats", 1), ("max_memory_allocated", 1), ("max_memory_reserved", 1)]


@pytest.mark.parametrize("device, current, wanted", [(torch.device("cuda", 1), 0, "cuda:1"),
                                                      (torch.device("cuda"), 3, "cuda:3"),
                                                      (torch.device("cpu"), 0, "cpu")])
def test_the_memory_timeline_is_the_runs_device(tmp_path, monkeypatch, device, current, wanted):
    asked = []
    prof = types.SimpleNamespace(export_memory_timeline=lambda path, device=None: asked.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    found = profiling.memory_artifacts(prof, tmp_path, "rank1", device, snapshot=False)
    assert asked == [wanted] and found.timeline


def test_a_memory_snapshot_on_cuda_is_dumped_beside_the_trace_with_how_to_view_it(tmp_path, monkeypatch):
    """--memory-snapshot's CUDA branch through a stand-in allocator: the pickle written where asked, the
    history switched off after it, and the offline viewer's command named."""
    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: Path(path).write_bytes(b"snapshot"))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    prof = types.SimpleNamespace(export_memory_timeline=lambda path, device=None: Path(path).write_text("<html>"))
    found = profiling.memory_artifacts(prof, tmp_path, "resnet18_fast", torch.device("cuda"), snapshot=True)
    assert Path(found.snapshot) == tmp_path / "resnet18_fast_memory_snapshot.pickle" and Path(found.snapshot).exists()
    assert "torch.cuda._memory_viz trace_plot" in found.view_snapshot and calls == [{"enabled": None}]
    assert Path(found.timeline).exists()
