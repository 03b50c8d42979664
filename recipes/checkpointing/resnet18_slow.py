"""Checkpointing recipe, ResNet-18 on CIFAR-10, slow twin: every activation kept for the backward pass.

ResNet-18 (10 classes, weights=None) as its six stages (stem, layer1-4, head), Adam(lr=1e-4),
CrossEntropyLoss, 224 px crops. The input pipeline lives on the device so the pair measures the
memory/compute trade and nothing else.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.stages().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
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
