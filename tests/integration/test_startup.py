"""Where users start (common/startup.py): the locked torch against their driver and GPU, read from a
stand-in nvidia-smi; a GPU that torch cannot see said before anything runs; an old torch in one line."""
import os
import subprocess
import sys

import pytest

from common import startup
from common.runners import launch

from conftest import REPO

A100_OLD_DRIVER = "NVIDIA A100-SXM4-40GB, 550.54.15, 8.0"


def stand_in_smi(tmp_path, line: str, knows_compute_cap: bool = True):
    """A folder holding an nvidia-smi that answers --query-gpu as a real one does (one CSV line per GPU);
    a driver before 510 does not know the compute_cap field."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    refuse = "" if knows_compute_cap else ('case "$1" in *compute_cap*) echo "Field \\"compute_cap\\" is not a valid '
                                           'field to query." >&2; exit 2;; esac\n')
    fields = line if knows_compute_cap else ", ".join(line.split(", ")[:2])
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\n{refuse}echo '{fields}'\n")
    (folder / "nvidia-smi").chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_make_setup_stops_before_the_venv_on_a_driver_the_locked_torch_cannot_use(tmp_path):
    env = {**os.environ, **stand_in_smi(tmp_path, A100_OLD_DRIVER)}
    env.pop("MAKEFLAGS", None)
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "setup", f"VENV={venv}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("make setup:")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stdout + proc.stderr
    assert "needs NVIDIA driver 580 or newer, and this machine's is 550.54.15" in ours[0]
    assert "`make setup TORCH_INDEX=cu126`" in ours[0] and not venv.exists()
    # the command it names installs the lock's torch and torchvision built for CUDA 12.6, from PyTorch's index
    plan = subprocess.run(["make", "-n", "setup", f"VENV={venv}", "TORCH_INDEX=cu126"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60).stdout
    lock = startup.locked()
    plan = plan.replace("\\\n", "").replace("\t", "")
    assert "common.startup --setup --index cu126" in plan  # the chosen build checked against this GPU too
    # that build's torch first, then the lock less torch and the lock's CUDA wheels: never two builds' libraries
    first = startup.pip_command("cu126", lock, f"{venv}/bin/python -m pip")
    assert plan.index(first) < plan.index("--lock-without-cuda")
    rest = startup.without_cuda()
    assert "nvidia-ml-py==" in rest and "triton==" in rest and "torchmetrics==" in rest
    assert not any(line.startswith(("torch==", "torchvision==", "nvidia-cudnn-cu13==", "nvidia-nccl-cu13==",
                                    "cuda-toolkit==")) for line in rest.splitlines())


@pytest.mark.parametrize("line, smi_knows_cap, says, fix", [
    ("Tesla P100-PCIE-16GB, 580.65.06, 6.0", True, "has no kernels for the Tesla P100-PCIE-16GB (sm_60",
     "TORCH_INDEX=cu126"),
    ("Tesla V100-SXM2-32GB, 580.65.06, 7.0", True, "has no kernels for the Tesla V100-SXM2-32GB (sm_70",
     "TORCH_INDEX=cu126"),  # CUDA 12.8's build dropped Volta too in torch 2.11
    (A100_OLD_DRIVER, False, "needs NVIDIA driver 580 or newer", "TORCH_INDEX=cu126"),  # no compute_cap field
    ("NVIDIA B200, 575.57.08, 10.0", True, "needs NVIDIA driver 580 or newer", "TORCH_INDEX=cu128"),  # no 12.6
    ("Tesla K80, 470.256.02, 3.7", True, "no torch this cookbook can use has kernels for the Tesla K80", None),
])
def test_the_setup_line_names_what_this_gpu_needs(tmp_path, monkeypatch, line, smi_knows_cap, says, fix):
    monkeypatch.setenv("PATH", stand_in_smi(tmp_path, line, smi_knows_cap)["PATH"])
    why = startup.setup_problem(startup.gpus(), startup.locked())
    assert says in why and (fix is None or fix in why) and ("TORCH_INDEX" in why) == bool(fix)
    if fix:  # the build it names passes the same check
        assert startup.setup_problem(startup.gpus(), startup.locked(), fix.split("=")[1]) is None


def test_a_gpu_torch_sees_but_has_no_kernels_for_stops_in_one_line():
    """A V100 on driver 580 under the CUDA 13 build: available, then "no kernel image" at the first op."""
    cu130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    why = startup.no_kernels("2.11.0+cu130", "13.0", (7, 0), "Tesla V100-SXM2-32GB", cu130)
    assert why.startswith("torch 2.11.0+cu130 (CUDA 13.0) has no kernels for the Tesla V100-SXM2-32GB (sm_70")
    assert "make setup TORCH_INDEX=cu126" in why
    assert startup.no_kernels("2.11.0+cu130", "13.0", (8, 9), "NVIDIA L4", cu130) is None  # sm_86 runs on sm_89
    assert startup.no_kernels("2.11.0+cu130", "13.0", (9, 0), "H100", ["sm_80", "compute_80"]) is None  # PTX


def test_a_gpu_the_lock_can_use_passes_and_no_gpu_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in_smi(tmp_path, "NVIDIA H100 80GB HBM3, 580.95.05, 9.0")["PATH"])
    assert startup.main(["--setup"]) == 0
    assert startup.setup_problem([], startup.locked()) is None


def test_a_run_where_nvidia_smi_sees_a_gpu_and_torch_does_not_says_so_before_anything_runs(tmp_path, monkeypatch,
                                                                                           capsys):
    """This machine's torch has no CUDA device: with the stand-in, as on a GPU machine whose driver is too old."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    monkeypatch.setenv("PATH", stand_in_smi(tmp_path, A100_OLD_DRIVER)["PATH"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("COOKBOOK_DEVICE_SEEN", raising=False)  # a sitting's probe, as a tour sets it: not here
    launch.cuda_device_count.cache_clear()
    try:
        assert launch.cuda_device_count() == 0
    finally:
        launch.cuda_device_count.cache_clear()
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("warning: nvidia-smi sees NVIDIA A100-SXM4-40GB (driver 550.54.15) "
                                                 f"but torch {torch.__version__} (CUDA {torch.version.cuda}) does not")
    # a script asked for CUDA stops in that line; under auto its result keeps it among its notices
    env = {**os.environ, "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "COOKBOOK_ZYGOTE": "0"}
    proc = subprocess.run([sys.executable, "-m", "recipes.amp.churn_slow", "--smoke", "--device", "cuda", "--out",
                           str(tmp_path / "r.json")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nvidia-smi sees NVIDIA A100" in proc.stderr
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hidden on purpose: nothing to say
    assert startup.unseen(torch.__version__, torch.version.cuda) is None


def fake_torch(tmp_path, version: str) -> dict:
    """A torch distribution's metadata first on the path: what importlib.metadata reads as the installed torch."""
    info = tmp_path / "fake" / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return {"PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{REPO}", "COOKBOOK_ZYGOTE": "0"}


@pytest.mark.parametrize("command", [["-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu"],
                                     ["-m", "recipes.amp.churn_slow", "--smoke", "--device", "cpu"]])
def test_an_older_torch_fails_at_the_first_command_in_one_line(tmp_path, command):
    env = {**os.environ, **fake_torch(tmp_path, "2.8.0+cu128")}
    proc = subprocess.run([sys.executable, *command, "--reports-dir" if "compare" in command[1] else "--out",
                           str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "torch 2.8.0+cu128 is older than 2.9" in proc.stderr and not (tmp_path / "out").exists()
    assert startup.torch_too_old("2.9.0a0+git1234") is None and startup.torch_too_old("2.11.0+cu130") is None


def test_a_runner_stops_on_a_gpu_torch_sees_without_kernels_for_it(monkeypatch):
    """The probe's branch where torch sees a GPU (a V100 on driver 580 under the CUDA 13 build), simulated:
    its answer stands in for the child's, as on that machine."""
    import json
    import types

    from common.errors import CookbookError

    said = {"gpus": 1, "torch": "2.11.0+cu130", "cuda": "13.0", "capability": [7, 0], "name": "Tesla V100-SXM2-32GB",
            "archs": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}
    monkeypatch.setattr(launch.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=json.dumps(said) + "\n"))
    monkeypatch.delenv("COOKBOOK_DEVICE_SEEN", raising=False)
    launch.cuda_device_count.cache_clear()
    try:
        with pytest.raises(CookbookError, match="has no kernels for the Tesla V100-SXM2-32GB .sm_70"):
            launch.cuda_device_count()
        said.update(capability=[9, 0], name="NVIDIA H100 80GB HBM3")  # an H100: its kernels are there
        launch.cuda_device_count.cache_clear()
        assert launch.cuda_device_count() == 1
    finally:
        launch.cuda_device_count.cache_clear()


def test_a_script_stops_on_a_gpu_its_torch_has_no_kernels_for(monkeypatch):
    """The harness's own check (measure.process.resolve_device) on a simulated T4 under a build from sm_80
    only, and on an A100 under the CUDA 13 build (it runs)."""
    import torch

    from common.errors import CookbookError
    from common.measure import process

    for name, cap, archs, stops in (("Tesla T4", (7, 5), ["sm_80", "sm_90"], True),
                                    ("NVIDIA A100-SXM4-40GB", (8, 0), ["sm_75", "sm_80", "sm_90"], False)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0, c=cap: c)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0, n=name: n)
        monkeypatch.setattr(torch.cuda, "get_arch_list", lambda a=archs: a)
        if stops:
            with pytest.raises(CookbookError, match=f"has no kernels for the {name}"):
                process.resolve_device("auto")
        else:
            assert process.resolve_device("auto")[0].type == "cuda"
