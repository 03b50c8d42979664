"""`make gpu-check`: every target once, one line each, on a CPU at smoke sizes."""
import os
import subprocess
import sys

import pytest

from common import catalog
from common.runners import gpucheck

from conftest import REPO


def test_the_check_covers_every_recipe_sweep_ladder_and_diagnosis(tmp_path, monkeypatch):
    monkeypatch.setattr(gpucheck.shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")  # ncu installed
    names = [t.name for t in gpucheck.targets(smoke=False, out=tmp_path)]
    sweeps = catalog.swept()
    assert names == ["tests", *[f"recipe-{r}" for r in catalog.available()], *[f"sweep-{r}" for r in sweeps],
                     "ladder", "diagnose-churn", "diagnose-resnet18", "doctor-churn", "doctor-resnet18", "ncu-amp"]
    for t in gpucheck.targets(smoke=False, out=tmp_path)[1:]:
        assert str(tmp_path) in t.cmd  # never over the committed reports
        assert "--smoke" not in t.cmd
        assert "20" in t.cmd or "10" in t.cmd or t.name == "ncu-amp"  # a GPU's few steps (ncu: 2 timed, 1 profiled)
    smoke = gpucheck.targets(smoke=True, out=tmp_path)
    assert all("--smoke" in t.cmd for t in smoke[1:]) and "ncu-amp" not in [t.name for t in smoke]  # ncu: CUDA only
    monkeypatch.setattr(gpucheck.shutil, "which", lambda name: None)
    assert "ncu-amp" not in [t.name for t in gpucheck.targets(smoke=False, out=tmp_path)]  # not installed


def _check(tmp_path, *flags, env=None):
    return subprocess.run([sys.executable, "-m", "common.runners.gpucheck", "--out", str(tmp_path), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_without_cuda_it_says_to_use_a_gpu_or_smoke(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = _check(tmp_path)
    assert proc.returncode == 2 and "no CUDA device here" in proc.stderr and proc.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())


def test_one_line_per_target_ok_or_failed_with_its_log(tmp_path):
    # the two cheapest targets: the fault crashes the measured baseline (variant "mlp"); the doctor runs
    # the same script plain, where no fault is planted
    proc = _check(tmp_path, "--smoke", "--only", "diagnose-churn,doctor-churn", "--jobs", "2",
                  env={"COOKBOOK_FAULT": "crash:mlp:churn"})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert any(line.startswith("ok      doctor-churn") for line in lines)
    failed = next(line for line in lines if line.startswith("FAILED  diagnose-churn"))
    assert "exit 1" in failed and "(log: " in failed and (tmp_path / "logs" / "diagnose-churn.log").exists()
    assert lines[-1] == "gpu-check: 1 of 2 ok; failed: diagnose-churn"
