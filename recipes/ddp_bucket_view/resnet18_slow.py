"""DDP bucket-view recipe, ResNet-18 on CIFAR-10, slow twin: gradients copied into the buckets.

Each rank (torchrun --standalone --nproc-per-node N) trains ResNet-18 (10 classes, weights=None,
Adam(lr=1e-4), CrossEntropyLoss, the input pipeline on the device) wrapped in
DistributedDataParallel on its share of the global batch (64 on a GPU), one optimizer step per
batch. With gradient_as_bucket_view=False (DDP's default) every gradient lives twice: in the
parameter's .grad and in the bucket the reducer copies it into and all-reduces.
"""
import torch

from common import distributed, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
options = dict(gradient_as_bucket_view=False)
model = distributed.wrap(resnet18.model().to(run.device), run.device, **options)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)  # the global batch, alike on every rank

for images, labels in run.loop(batches):
    images, labels = distributed.rank_share(images, labels)  # this rank's share of it
    with run.phase("forward"):
        loss = criterion(model(images), labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # the reducer all-reduces each bucket as its gradients become ready
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
