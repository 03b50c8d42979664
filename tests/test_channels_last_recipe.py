"""`make recipe-channels_last` in smoke mode: ResNet-18 only, NHWC batches, the same training."""
import torch

from common import data

from conftest import comparison_of


def test_channels_last_pair_passes_parity_on_resnet18_only(smoke_run):
    proc, reports = smoke_run("channels_last")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "channels_last")["workloads"]
    assert list(workloads) == ["resnet18"]  # the MLP has no convolutions
    assert workloads["resnet18"]["parity"]["ok"]


def test_the_device_pipeline_makes_nhwc_batches_when_asked():
    run = type("Run", (), {"data": "synthetic", "batch_size": 4, "image_size": 32, "device": torch.device("cpu"),
                           "generator": torch.Generator().manual_seed(0)})()
    images, _ = next(iter(data.cifar10_train_batches(run, channels_last=True)))
    assert images.is_contiguous(memory_format=torch.channels_last) and images.shape == (4, 3, 32, 32)
    images, _ = next(iter(data.cifar10_train_batches(run)))
    assert images.is_contiguous()
