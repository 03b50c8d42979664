"""Fused-ops recipe, ResNet-18 on CIFAR-10, fast twin: a fused Adam.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused=True): the whole update of all 62
parameter tensors in one fused kernel per group of tensors (a fused CPU kernel on a CPU), not
foreach's chain of multi-tensor ops; CrossEntropyLoss, 224 px crops, the input pipeline on the device.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)  # one kernel for every tensor's update
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)

for images, labels in run.loop(batches):
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
