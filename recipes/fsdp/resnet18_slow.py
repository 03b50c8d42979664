"""FSDP recipe, ResNet-18 on CIFAR-10, slow twin: DDP, a whole copy of the training state on every rank.

Each rank (torchrun) trains ResNet-18 (10 classes, weights=None, Adam(lr=1e-4), CrossEntropyLoss, the
input pipeline on the device) on its share of the global batch (64 on a GPU). DistributedDataParallel
keeps every parameter, every gradient and Adam's two moments whole on every rank (about 45 + 45 + 90
MB for ResNet-18's 11.2M parameters in fp32) and all-reduces the gradients.
"""
import torch

from common import distributed, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = distributed.wrap(resnet18.model().to(run.device), run.device)  # a whole copy per rank
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)  # the global batch, alike on every rank

for images, labels in run.loop(batches):
    images, labels = distributed.rank_share(images, labels)  # this rank's share of it
    with run.phase("forward"):
        loss = criterion(model(images), labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

distributed.held(model, optimizer)  # what this rank holds: parameters, gradients, optimizer state
run.finish()
