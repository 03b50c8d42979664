"""Precision recipe, ResNet-18 on CIFAR-10, fast twin: TF32 convolutions and matmuls.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device; convolutions and matmuls on TF32 tensor cores (fp32 range, 10-bit mantissa).
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
torch.backends.cuda.matmul.fp32_precision = "tf32"  # TF32 tensor cores for matmuls: fp32 range, 10-bit mantissa
torch.backends.cudnn.conv.fp32_precision = "tf32"  # and for convolutions (sm_80+; the runner skips older GPUs)
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
