"""Compile recipe, ResNet-18 on CIFAR-10, slow twin: eager training at a launch-bound batch.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused), CrossEntropyLoss, 224 px crops, the
input pipeline on the device; autocast (bf16, or fp16 with a GradScaler below sm_80) and
channels_last in both twins, so the GPU work per step is small (batch 32) and the step is bound by
the host launching its ~500 kernels one by one: the regime where compiling into CUDA graphs pays
(see the README and `make sweep-compile`).
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device, memory_format=torch.channels_last)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=run.device.type == "cuda")
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run, channels_last=True)
amp_dtype = getattr(torch, run.profile.amp_dtype)  # bf16 from sm_80 (and a CPU); fp16 below (a T4)
scaler = torch.amp.GradScaler(run.device.type, enabled=amp_dtype == torch.float16)  # fp16's loss scale

for images, labels in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
    with run.phase("optimizer"):
        scaler.step(optimizer)
        scaler.update()
    run.log_loss(loss)

run.finish()
