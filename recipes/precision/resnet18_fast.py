"""Precision recipe, ResNet-18 on CIFAR-10, fast twin: TF32 convolutions and matmuls.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device; convolutions and matmuls on TF32 tensor cores (fp32 range, 10-bit mantissa).
"""
import torch

from common import data, harness, models

run = harness.start(__file__, __doc__)
torch.backends.cuda.matmul.allow_tf32 = True  # TF32 tensor cores for matmuls: fp32 range, 10-bit mantissa
torch.backends.cudnn.allow_tf32 = True  # and for convolutions (set_float32_matmul_precision("high") does matmuls)
model = models.resnet18().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
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
