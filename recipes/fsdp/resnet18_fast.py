"""FSDP recipe, ResNet-18 on CIFAR-10, fast twin: FSDP2, the training state split across the ranks.

Each rank (torchrun) trains ResNet-18 (10 classes, weights=None, Adam(lr=1e-4), CrossEntropyLoss, the
input pipeline on the device) on its share of the global batch (64 on a GPU). fully_shard on every
residual block, then on the root, keeps 1/N of each parameter, its gradient and Adam's moments per
rank: a block's parameters are all-gathered for its forward and its backward, its gradients
reduce-scattered, each rank's optimizer stepping its own shard.
"""
import torch
from torchvision.models.resnet import BasicBlock  # the unit each rank gathers whole, one at a time

from common import distributed, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = distributed.shard(resnet18.model().to(run.device), run.device, BasicBlock)  # 1/N per rank, by block
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
