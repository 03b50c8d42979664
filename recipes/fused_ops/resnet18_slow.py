"""Fused-ops recipe, ResNet-18 on CIFAR-10, slow twin: PyTorch's default Adam.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4) as PyTorch builds it by default: foreach over
the 62 parameter tensors on CUDA (a chain of multi-tensor ops, each a few kernels), the for-loop on
a CPU; CrossEntropyLoss, 224 px crops, the input pipeline on the device.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)  # PyTorch's default: foreach on CUDA
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
