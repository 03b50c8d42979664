import dataclasses
import subprocess

import torch

from common import env
from common.measure import stamp

KEYS = {"device_type", "gpu_name", "driver", "cuda", "cudnn", "torch", "torchvision", "python", "cpu",
        "cpu_count", "cpu_set", "date", "git_commit", "tf32_matmul", "tf32_cudnn", "float32_matmul_precision"}


def test_stamp_has_every_field_the_report_prints():
    s = stamp.take(torch.device("cpu"))
    assert KEYS <= {f.name for f in dataclasses.fields(s)}
    assert s.device_type == "cpu" and s.gpu_name is None
    assert s.torch == torch.__version__
    assert s.torchvision and s.cpu and s.cpu_count >= 1
    assert s.cpu_set == env.cpu_set() and s.cpu_set
    assert s.date.endswith("+00:00")  # UTC, ISO 8601


def test_git_commit_is_recorded_in_a_checkout():
    commit = env.git_commit()
    assert len(commit.split("-")[0]) == 12


def test_outside_a_checkout_the_commit_says_so(tmp_path, monkeypatch):
    """The first H100 run's stamp said 'commit None': the tree had been copied without .git."""
    def no_git(*args, **kwargs):
        return subprocess.CompletedProcess(args, 128, "", "fatal: not a git repository")

    monkeypatch.setattr(env.subprocess, "run", no_git)
    assert env.git_commit() == "unknown (not a git checkout)"


def test_cpu_results_are_labelled_cpu():
    label = env.describe_device(stamp.take(torch.device("cpu")))
    assert label.startswith("CPU") and "not a GPU result" in label


def test_cpu_ranges_read_like_a_taskset():
    assert env.cpu_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert env.cpu_ranges([3]) == "3"
