"""Bad input gives one clear line on stderr and exit status 2, not a stack trace."""
import pytest

from conftest import run_module


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
    line = one_line(run_module("recipes.amp.churn_slow", "--smoke", "--data", str(bad), "--out", str(tmp_path / "r.json")))
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
