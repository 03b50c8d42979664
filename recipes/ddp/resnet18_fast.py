"""DDP recipe, ResNet-18 on CIFAR-10, fast twin: one all-reduce per optimizer step (no_sync).

Each rank (torchrun --standalone --nproc-per-node N) trains ResNet-18 (10 classes, weights=None,
Adam(lr=1e-4), CrossEntropyLoss, the input pipeline on the device) wrapped in
DistributedDataParallel on its share of the global batch (64 on a GPU), as 4 micro-batches whose
gradients add up before one optimizer step. The first 3 micro-batches run under `no_sync()`: their
gradients stay local, and the last backward all-reduces the sum once.
"""
import torch

from common import distributed, harness
from common.workloads import resnet18
from recipes.ddp import MICRO_BATCHES, rank_micro_batches  # this rank's share, in 4 micro-batches

run = harness.start(__file__, __doc__)
model = distributed.wrap(resnet18.model().to(run.device), run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)  # the global batch, alike on every rank

for images, labels in run.loop(batches):
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0  # this rank's share of the global batch's mean loss
    parts = rank_micro_batches((images, labels))
    for i, (images_part, labels_part) in enumerate(parts):  # i: which micro-batch
        with distributed.no_sync(model, unless=i == MICRO_BATCHES - 1):  # all-reduce after the last one only
            with run.phase("forward"):
                part = criterion(model(images_part), labels_part) / MICRO_BATCHES
            with run.phase("backward"):
                part.backward()  # the last one all-reduces the summed gradients once
        loss = loss + part.detach()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
