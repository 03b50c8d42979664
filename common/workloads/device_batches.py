"""Input pipelines that live on the device, so that a recipe measures its technique, not the loader.

The whole (small) data set sits on the device; each epoch is a device permutation sliced into
batches, and CIFAR-10's augmentation (random-resized-crop + horizontal flip + normalize) runs there
on the whole batch at once. No step of these iterators waits for the host.
"""
import math

import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DeviceBatches:
    """Endless shuffled batches of same-length device tensors; the last partial batch is dropped so
    every step has the same shape."""

    def __init__(self, tensors, batch_size: int, generator: torch.Generator, transform=None):
        self.tensors = tensors
        self.n = tensors[0].shape[0]
        if batch_size > self.n:
            raise ValueError(f"batch size {batch_size} is larger than the data set ({self.n} samples)")
        self.batch_size = batch_size
        self.generator = generator
        self.transform = transform

    def __iter__(self):
        device = self.tensors[0].device
        while True:
            perm = torch.randperm(self.n, device=device, generator=self.generator)
            for start in range(0, self.n - self.batch_size + 1, self.batch_size):
                idx = perm[start:start + self.batch_size]
                batch = [t[idx] for t in self.tensors]
                yield self.transform(*batch) if self.transform else tuple(batch)


def crop_boxes(n: int, generator: torch.Generator, device, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), tries=10):
    """torchvision RandomResizedCrop.get_params for a batch of square images, in continuous
    coordinates: width and height as fractions of the side, the first of `tries` draws that fits,
    else the whole image (torchvision's fallback for a square image)."""
    area = torch.empty(n, tries, device=device).uniform_(*scale, generator=generator)
    log_r = torch.empty(n, tries, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]), generator=generator)
    aspect = log_r.exp()
    w, h = (area * aspect).sqrt(), (area / aspect).sqrt()
    fits = (w <= 1) & (h <= 1)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # index of the first draw that fits
    any_fit = fits.any(dim=1)
    w = torch.where(any_fit, w.gather(1, first).squeeze(1), torch.ones_like(any_fit, dtype=w.dtype))
    h = torch.where(any_fit, h.gather(1, first).squeeze(1), torch.ones_like(any_fit, dtype=h.dtype))
    return w, h


class CropFlipNormalize:
    """RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize on a uint8 NHWC batch,
    as one affine_grid + grid_sample (bilinear) on the device."""

    def __init__(self, size: int, generator: torch.Generator, device, channels_last: bool = False):
        self.size = size
        self.generator = generator
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)

    def __call__(self, images_u8, labels):
        n, device, g = images_u8.shape[0], images_u8.device, self.generator
        x = images_u8.permute(0, 3, 1, 2).float().div_(255)
        w, h = crop_boxes(n, g, device)
        # box centre in [-1, 1] coordinates so that the box stays inside the image
        cx = (torch.rand(n, device=device, generator=g) * 2 - 1) * (1 - w)
        cy = (torch.rand(n, device=device, generator=g) * 2 - 1) * (1 - h)
        flip = torch.rand(n, device=device, generator=g) < 0.5
        theta = torch.zeros(n, 2, 3, device=device)
        theta[:, 0, 0] = torch.where(flip, -w, w)  # a negative x-scale is the horizontal flip
        theta[:, 0, 2] = cx
        theta[:, 1, 1] = h
        theta[:, 1, 2] = cy
        grid = F.affine_grid(theta, [n, 3, self.size, self.size], align_corners=False)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        return ((out - self.mean) / self.std).contiguous(memory_format=self.memory_format), labels
