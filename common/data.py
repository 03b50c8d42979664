"""The workloads' data: device-resident batch streams (see device_batches for why), and the
classic host-side DataLoader inputs that the dataloader recipe starts from."""
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from common.workloads import cifar10, telco
from common.workloads.device_batches import CropFlipNormalize, DeviceBatches

# each workload's host arrays, read once per process: a pipelined process reads them while it waits
HOST_LOADERS = {"churn": telco.load, "resnet18": cifar10.load_train}
_HOST = {}


def host_arrays(workload: str, data_arg: str | None):
    """The workload's arrays in host memory and their source record (HOST_LOADERS), read once."""
    key = (workload, data_arg)
    if key not in _HOST:
        _HOST[key] = HOST_LOADERS[workload](data_arg)
    return _HOST[key]


def preload(workload: str, data_arg: str | None) -> None:
    """A workload's host arrays read ahead (a workload without any: nothing)."""
    if workload in HOST_LOADERS:
        host_arrays(workload, data_arg)


def _telco(run):
    """The Telco split (X_train, X_test, y_train, y_test) for run.data; the run's result names its source."""
    *split, source = host_arrays("churn", run.data)
    run.record_data_source(source)
    return split


def churn_train(run):
    """Standardized Telco training split (features, targets) on run.device."""
    X_train, _, y_train, _ = _telco(run)
    return torch.from_numpy(X_train).to(run.device), torch.from_numpy(y_train).to(run.device)


def churn_splits(run):
    """The seed's split as CPU tensors (X_train, X_test, y_train, y_test), standardized."""
    return tuple(torch.from_numpy(a) for a in _telco(run))


def churn_weights(run, model_factory) -> dict:
    """Weights of model_factory trained on the Telco train split (the same in every process, cached):
    a served model whose answers differ from customer to customer, so that parity can tell them apart."""
    from common.workloads import churn_weights

    X_train, _, y_train, _ = _telco(run)
    return churn_weights.trained(torch.from_numpy(X_train), torch.from_numpy(y_train), model_factory)


def device_batches(run, *tensors):
    """Shuffled batches of run.batch_size sliced from a device permutation."""
    return DeviceBatches(tensors, run.batch_size, run.generator)


def cifar10_train_batches(run, channels_last: bool = False):
    """CIFAR-10 train images (uint8, on the device) -> augmented, normalized float batches (NHWC in
    memory with channels_last=True: the layout tensor-core convolutions want)."""
    images, labels, source = host_arrays("resnet18", run.data)
    run.record_data_source(source)
    tensors = (torch.from_numpy(images).to(run.device), torch.from_numpy(labels).to(run.device))
    return DeviceBatches(tensors, run.batch_size, run.generator,
                         transform=CropFlipNormalize(run.image_size, run.generator, run.device, channels_last))


def churn_serving(run):
    """Standardized Telco test split on run.device: the requests a served model answers."""
    _, X_test, _, _ = _telco(run)
    return torch.from_numpy(X_test).to(run.device)


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


class SeededAugmentation(Dataset):
    """A dataset whose random transform draws from a seed of (run seed, epoch, sample): the same
    crop for the same sample whichever process augments it, so a loader pair differs in speed only."""

    keyed = True

    def __init__(self, dataset, transform, seed: int):
        self.dataset, self.transform, self.seed = dataset, transform, seed

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, key):
        epoch, index = key
        image, label = self.dataset[index]
        with torch.random.fork_rng(devices=[]):  # leaves the process's own CPU RNG as it was
            torch.manual_seed((self.seed * 1_000_003 + epoch) * 1_000_003 + index)
            return self.transform(image), label


def loader(run, dataset, **options):
    """A DataLoader over `dataset` in DeviceBatches' order, endless; `options` are the knobs the
    dataloader recipe turns (num_workers, pin_memory, ...). Its own CPU generator, so that worker
    seeding does not draw from the global RNG that dropout uses."""
    order = PermutationBatches(len(dataset), run.batch_size, run.generator, keyed=getattr(dataset, "keyed", False))
    return DataLoader(dataset, batch_sampler=order, generator=torch.Generator().manual_seed(run.seed), **options)


def cifar10_train_dataset(run):
    """CIFAR-10 train images as the lab loads them: PIL images through torchvision's transforms on
    the CPU (random-resized-crop, flip, to-tensor, normalize), one image at a time; the random draws
    seeded per sample and epoch (SeededAugmentation)."""
    from torchvision import transforms

    from common.workloads.device_batches import IMAGENET_MEAN, IMAGENET_STD

    augment = transforms.Compose([transforms.RandomResizedCrop(run.image_size), transforms.RandomHorizontalFlip(),
                                  transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dataset, source = cifar10.train_dataset(run.data)
    run.record_data_source(source)
    return SeededAugmentation(dataset, augment, run.seed)
