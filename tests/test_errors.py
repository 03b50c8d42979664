"""Bad input gives one clear line on stderr and exit status 2, not a stack trace."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_module


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_unknown_recipe_lists_the_valid_ones():
    line = one_line(run_module("common.compare", "turbo"))
    assert "unknown recipe 'turbo'" in line and "amp" in line


def test_unknown_workload_lists_the_valid_ones():
    line = one_line(run_module("common.compare", "amp", "--workloads", "bert"))
    assert "bert" in line and "churn, resnet18" in line


@pytest.mark.parametrize("flags, words", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--steps", "0"], "--steps: must be 1 or more"),
    (["--warmup", "-1"], "--warmup: must be 1 or more"),
    (["--batch-size", "x"], "--batch-size: 'x' is not a whole number"),
])
def test_bad_flags(flags, words):
    assert words in one_line(run_module("recipes.amp.churn_slow", *flags))


def test_unreadable_data_file(tmp_path):
    bad = tmp_path / "telco.csv"
    bad.write_bytes(b"\x00\x01\x02 not a csv")
    line = one_line(run_module("recipes.amp.churn_slow", "--smoke", "--data", str(bad),
                               "--out", str(tmp_path / "r.json")))
    assert str(bad) in line and "not a readable CSV" in line
    assert not (tmp_path / "r.json").exists()


def test_missing_data_file(tmp_path):
    line = one_line(run_module("recipes.amp.churn_fast", "--smoke", "--data", str(tmp_path / "nope.csv")))
    assert "no such file" in line


def test_cuda_requested_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = one_line(run_module("recipes.amp.churn_slow", "--device", "cuda", "--smoke"))
    assert "CUDA is not available" in line and "--device cpu" in line


def test_help_lists_the_shared_flags():
    out = run_module("recipes.amp.resnet18_fast", "--help").stdout
    for flag in ("--device", "--steps", "--warmup", "--batch-size", "--seed", "--data", "--out", "--trace-dir",
                 "--smoke", "--profile-steps", "--image-size"):
        assert flag in out


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = one_line(run_module("recipes.amp.churn_slow", "--smoke", "--data", "synthetic",
                               "--out", str(blocker / "r.json")))
    assert "output folder" in line and "cannot be written" in line and "choose another folder" in line
    assert blocker.read_text() == "not a folder"


def test_unwritable_trace_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(run_module("recipes.amp.churn_slow", "--smoke", "--data", "synthetic", "--out",
                               str(tmp_path / "r.json"), "--trace-dir", str(blocker / "traces")))
    assert "trace folder" in line and "cannot be written" in line
    assert not (tmp_path / "r.json").exists()


def test_unwritable_reports_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(run_module("common.compare", "amp", "--smoke", "--reports-dir", str(blocker / "reports")))
    assert "--reports-dir" in line and "choose a writable folder" in line


def test_cifar_folder_with_a_missing_batch(tmp_path):
    from common import cifar10

    root = cifar10.write_synthetic(tmp_path / "cifar", per_file=20)
    (root / cifar10.BATCHES / "test_batch").unlink()
    out = tmp_path / "r.json"
    line = one_line(run_module("recipes.amp.resnet18_slow", "--smoke", "--data", str(root), "--out", str(out)))
    assert "missing CIFAR-10 batch file test_batch" in line
    assert not out.exists()


def test_nsys_missing_says_what_to_do(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # a PATH without nsys
    proc = subprocess.run([sys.executable, "-m", "common.nsys", "amp"], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=120)
    line = one_line(proc)
    assert "nsys not found" in line and "make tensorboard" in line


def test_auto_device_on_cpu_says_so(tmp_path):
    import json

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "r.json"
    proc = run_module("recipes.amp.churn_slow", "--smoke", "--data", "synthetic", "--out", str(out),
                      "--profile-steps", "0")
    assert proc.returncode == 0, proc.stderr
    assert "CUDA not available: ran on CPU" in proc.stdout
    assert "CUDA not available: ran on CPU (numbers are CPU numbers)" in json.loads(out.read_text())["notices"]
