"""Precision recipe, ResNet-18 on CIFAR-10, slow twin: strict fp32 convolutions and matmuls.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device; every convolution and matmul in IEEE fp32 (cuDNN's TF32 default turned off).
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
torch.backends.cuda.matmul.fp32_precision = "ieee"  # strict fp32 matmuls (PyTorch's default)
torch.backends.cudnn.conv.fp32_precision = "ieee"  # strict fp32 convolutions (cuDNN's default is TF32)
model = resnet18.model().to(run.device)
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
