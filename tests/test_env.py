import torch

from common import env

KEYS = {"device_type", "gpu_name", "driver", "cuda", "cudnn", "torch", "torchvision", "python", "cpu",
        "cpu_count", "date", "git_commit", "tf32_matmul", "tf32_cudnn"}


def test_stamp_has_every_field_the_report_prints():
    s = env.stamp(torch.device("cpu"))
    assert KEYS <= set(s)
    assert s["device_type"] == "cpu" and s["gpu_name"] is None
    assert s["torch"] == torch.__version__
    assert s["torchvision"] and s["cpu"] and s["cpu_count"] >= 1
    assert s["date"].endswith("+00:00")  # UTC, ISO 8601


def test_git_commit_is_recorded_in_a_checkout():
    commit = env.git_commit()
    assert commit is not None and len(commit.split("-")[0]) == 12


def test_cpu_results_are_labelled_cpu():
    label = env.describe_device(env.stamp(torch.device("cpu")))
    assert label.startswith("CPU") and "not a GPU result" in label
