"""`make recipe-dataloader` in smoke mode, and the data plumbing that keeps its twins comparable."""
import torch
from torch.utils.data import TensorDataset

from common import data
from common.workloads.device_batches import DeviceBatches

from conftest import comparison_of


def test_dataloader_pairs_pass_parity_with_the_same_batches(smoke_run):
    proc, reports = smoke_run("dataloader")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "dataloader")["workloads"].items():
        par = entry["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6, (w, par)  # same samples, same crops


def test_loader_work_moves_out_of_the_training_process(smoke_run):
    """Churn: row-by-row gathering (about 2 ops per row) becomes a couple of gathers per batch.
    ResNet-18: the augmentation leaves the training process for a worker, which burns the CPU."""
    _, reports = smoke_run("dataloader")
    workloads = comparison_of(reports, "dataloader")["workloads"]
    data_ops = lambda v: v["evidence"]["phases"]["data"]["ops"]  # noqa: E731
    churn, resnet = workloads["churn"], workloads["resnet18"]
    assert data_ops(churn["slow"]) >= 10 * max(data_ops(churn["fast"]), 1)
    assert data_ops(resnet["slow"]) > 5 * max(data_ops(resnet["fast"]), 1)
    assert resnet["slow"]["host"]["worker_cpu_ms_per_step"] == 0
    assert resnet["fast"]["host"]["worker_cpu_ms_per_step"] > 0
    assert 0 <= resnet["slow"]["host"]["data_wait_share"] <= 1


def test_loader_batches_match_device_batches():
    features, targets = torch.arange(40.0).view(20, 2), torch.arange(20)
    run = type("Run", (), {"batch_size": 6, "seed": 0, "generator": torch.Generator().manual_seed(3)})()
    from_loader = iter(data.loader(run, TensorDataset(features, targets)))
    from_device = iter(DeviceBatches((features, targets), 6, torch.Generator().manual_seed(3)))
    for _ in range(7):  # past the end of an epoch (3 batches each)
        (a, b), (c, d) = next(from_loader), next(from_device)
        assert torch.equal(a, c) and torch.equal(b, d)


def test_seeded_augmentation_is_the_same_in_any_process_and_new_each_epoch():
    images = [(torch.rand(3, 8, 8), 1) for _ in range(4)]
    augment = lambda x: x * torch.rand(1)  # noqa: E731
    ds = data.SeededAugmentation(images, augment, seed=0)
    first = ds[(0, 2)][0]
    torch.rand(5)  # whatever the process drew in between
    assert torch.equal(first, ds[(0, 2)][0])
    assert not torch.equal(first, ds[(1, 2)][0])  # next epoch, another crop
    before = torch.get_rng_state()
    ds[(0, 3)]
    assert torch.equal(before, torch.get_rng_state())  # the process's own RNG is left alone
