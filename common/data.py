"""Data any workload's recipes use: its host arrays read once, device-resident batch streams (see
device_batches for why), and the classic host-side DataLoader that the dataloader recipe starts from."""
import torch
from torch.utils.data import DataLoader, Sampler

from common.workloads import host_arrays, preload  # noqa: F401 (the harness's and the recipes' door)
from common.workloads.device_batches import DeviceBatches


def device_batches(run, *tensors):
    """Shuffled batches of run.batch_size sliced from a device permutation."""
    return DeviceBatches(tensors, run.batch_size, run.generator)


class PermutationBatches(Sampler):
    """Endless index batches in DeviceBatches' order (the same generator, the same permutations), as
    a DataLoader batch_sampler: a DataLoader pair sees the batches its device-batching twin sees.
    keyed=True yields (epoch, index) keys instead, for datasets that seed augmentation per sample."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, keyed: bool = False):
        self.n, self.batch_size, self.generator, self.keyed = n, batch_size, generator, keyed

    def __iter__(self):
        epoch = 0
        while True:
            perm = torch.randperm(self.n, device=self.generator.device, generator=self.generator).tolist()
            for start in range(0, self.n - self.batch_size + 1, self.batch_size):
                chunk = perm[start:start + self.batch_size]
                yield [(epoch, i) for i in chunk] if self.keyed else chunk
            epoch += 1


def loader(run, dataset, **options):
    """A DataLoader over `dataset` in DeviceBatches' order, endless; `options` are the knobs the
    dataloader recipe turns (num_workers, pin_memory, ...). Its own CPU generator, so that worker
    seeding does not draw from the global RNG that dropout uses."""
    order = PermutationBatches(len(dataset), run.batch_size, run.generator, keyed=getattr(dataset, "keyed", False))
    return DataLoader(dataset, batch_sampler=order, generator=torch.Generator().manual_seed(run.seed), **options)
