"""AMP recipe, ResNet-18 on CIFAR-10, slow twin: fp32 training.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops. The input
pipeline lives on the device (uint8 CIFAR-10 there, random-resized-crop + flip in batches), and
model and batches are channels_last in both twins: in NCHW, bf16 BatchNorm falls back to slow
native kernels and cuDNN converts layouts, which hides what 16-bit math buys (see the README).
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device, memory_format=torch.channels_last)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run, channels_last=True)

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
