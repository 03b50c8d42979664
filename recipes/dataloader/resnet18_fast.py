"""DataLoader recipe, ResNet-18 on CIFAR-10, fast twin: worker processes, pinned memory, prefetch.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops made by
torchvision's transforms on PIL images (random-resized-crop, flip, to-tensor, normalize).
Worker processes (all cores but one) augment the next batches while the GPU trains on this one,
batches land in pinned memory, and the copy to the GPU no longer blocks the host.
"""
import torch

from common import data, harness
from common.workloads import resnet18
from recipes.dataloader import workers  # the worker count, sized from this machine's cores

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
n_workers = workers(run)  # all cores but one (--workers N: make sweep-dataloader turns it)
# augment in parallel processes while the GPU trains
batches = data.loader(run, resnet18.train_dataset(run), num_workers=n_workers,
                      pin_memory=run.device.type == "cuda",  # page-locked batches: async DMA to the GPU
                      persistent_workers=n_workers > 0,  # keep the workers (and their state) across epochs
                      prefetch_factor=4 if n_workers else None)  # each worker keeps 4 batches ready

for images, labels in run.loop(batches):
    with run.phase("copy"):
        # no host wait
        images, labels = images.to(run.device, non_blocking=True), labels.to(run.device, non_blocking=True)
    with run.phase("forward"):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
