"""The workloads' data as device-resident batch streams (see device_batches for why)."""
import torch

from common import cifar10, telco
from common.device_batches import CropFlipNormalize, DeviceBatches


def churn_train(run):
    """Standardized Telco training split (features, targets) on run.device; records the source."""
    X_train, _, y_train, _, run.data_source = telco.load(run.data)
    return torch.from_numpy(X_train).to(run.device), torch.from_numpy(y_train).to(run.device)


def device_batches(run, *tensors):
    """Shuffled batches of run.batch_size sliced from a device permutation."""
    return DeviceBatches(tensors, run.batch_size, run.generator)


def cifar10_train_batches(run):
    """CIFAR-10 train images (uint8, on the device) -> augmented, normalized float batches."""
    images, labels, run.data_source = cifar10.load_train(run.data)
    tensors = (torch.from_numpy(images).to(run.device), torch.from_numpy(labels).to(run.device))
    return DeviceBatches(tensors, run.batch_size, run.generator,
                         transform=CropFlipNormalize(run.image_size, run.generator, run.device))
