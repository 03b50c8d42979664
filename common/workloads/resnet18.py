"""The resnet18 workload: torchvision's ResNet-18 from scratch on CIFAR-10, as the seed's lab trains it.

A step's samples are images. The recipes' batches are augmented on the device (random-resized crop,
flip, normalize: device_batches); the dataloader recipe's slow twin augments on the host instead,
one PIL image at a time (train_dataset)."""
import contextlib

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from common.workload_specs import WorkloadSpec
from common.workloads import cifar10, host_arrays
from common.workloads.device_batches import CropFlipNormalize, DeviceBatches

WORKLOAD = WorkloadSpec(
    title="ResNet-18 on CIFAR-10",
    order=1,
    sizes={
        "cuda": {"batch_size": 32, "steps": 100, "warmup": 15, "profile_steps": 5, "image_size": 224,
                 "min_time": 2.0},
        "cpu": {"batch_size": 8, "steps": 24, "warmup": 3, "profile_steps": 2, "image_size": 112, "min_time": 2.0},
        # its learning probe at batch 4 cuts the loss by 94% in 4 steps (12 elsewhere: common.presets)
        "smoke": {"batch_size": 4, "steps": 3, "warmup": 1, "profile_steps": 1, "image_size": 64, "min_time": 0.0,
                  "probe_steps": 4},
    },
    size_flags={"image_size": "crop size in pixels"},
    # a T4's fp32 step at amp's batch 256 and 224 px is about half a second: a sitting caps the steps there
    gpu_class_steps={"T4": {"steps": 30, "warmup": 5}, "L4": {"steps": 40, "warmup": 8}},
    load="common.workloads.cifar10:load_train",
    check="common.workloads.cifar10:check_folder",
    locate="common.workloads.cifar10:locate",
    dataset="cifar10",
    data_help="CIFAR_ROOT",
    baseline="baselines.resnet18_cifar10",
)


def train_batches(run, channels_last: bool = False):
    """CIFAR-10 train images (uint8, on the device) -> augmented, normalized float batches (NHWC in
    memory with channels_last=True: the layout tensor-core convolutions want)."""
    images, labels, source = host_arrays("resnet18", run.data)
    run.record_data_source(source)
    tensors = (torch.from_numpy(images).to(run.device), torch.from_numpy(labels).to(run.device))
    return DeviceBatches(tensors, run.batch_size, run.generator,
                         transform=CropFlipNormalize(run.image_size, run.generator, run.device, channels_last))


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


def train_dataset(run):
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


def model(num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18 from scratch (weights=None: nothing is downloaded)."""
    from torchvision.models import resnet18 as tv_resnet18

    return tv_resnet18(weights=None, num_classes=num_classes)


def stages(num_classes: int = 10) -> nn.Sequential:
    """torchvision's ResNet-18 (same modules, same parameters, same forward) as a sequence of its
    stages: stem, layer1..layer4, head. Segment-wise tools such as checkpoint_sequential need this."""
    net = model(num_classes)
    stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    head = nn.Sequential(net.avgpool, nn.Flatten(1), net.fc)
    return nn.Sequential(stem, net.layer1, net.layer2, net.layer3, net.layer4, head)


@contextlib.contextmanager
def batchnorm_stats_kept(module: nn.Module, inner=None):
    """Run `inner` (a context, e.g. a checkpoint's recomputation) with the running statistics of
    every BatchNorm in `module` restored afterwards. A recomputed train-mode BatchNorm updates its
    running mean, variance and count a second time per step (PyTorch issue 96136); the forward has
    already updated them once, so the recomputation must leave them as it found them."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    saved = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
    try:
        with inner if inner is not None else contextlib.nullcontext():
            yield
    finally:  # the recomputation may end early, by an exception (it stops once it has what it needs)
        with torch.no_grad():
            for m, (mean, var, count) in zip(norms, saved):
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
                m.num_batches_tracked.copy_(count)
