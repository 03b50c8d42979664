"""Fused-ops recipe, ResNet-18 on CIFAR-10, fast twin: a fused Adam.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4) fused into a few kernels over all 62 parameter
tensors on CUDA (multi-tensor `foreach` on CPU), CrossEntropyLoss, 224 px crops, the input
pipeline on the device.
"""
import torch

from common import data, harness, models

run = harness.start(__file__, __doc__)
model = models.resnet18().to(run.device)
fused = run.device.type == "cuda"  # fused Adam: a few kernels for all parameters (CUDA); foreach elsewhere
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=fused, foreach=not fused)  # not 9 ops per tensor
criterion = torch.nn.CrossEntropyLoss()
batches = data.cifar10_train_batches(run)

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
