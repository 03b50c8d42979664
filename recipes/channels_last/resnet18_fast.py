"""Channels-last recipe, ResNet-18 on CIFAR-10, fast twin: NHWC for model and batches.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, fp32 (TF32
convolutions, cuDNN's default), the input pipeline on the device. Weights and batches are stored
channels_last (NHWC), the layout tensor-core convolution kernels read directly: no layout
conversions around each convolution, and BatchNorm and ReLU run in that layout too.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device, memory_format=torch.channels_last)  # NHWC weights
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run, channels_last=True)  # NHWC batches, made so on the device

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
