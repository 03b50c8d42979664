"""AMP recipe, ResNet-18 on CIFAR-10, fast twin: mixed precision training.

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
# bf16 where the GPU has it (sm_80+, and a CPU); fp16 below, which needs loss scaling (a T4)
amp_dtype = getattr(torch, run.profile.amp_dtype)  # from the compute capability, not torch's emulation
scaler = torch.amp.GradScaler(run.device.type, enabled=amp_dtype == torch.float16)  # no-op for bf16

for images, labels in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):  # convs/matmuls in 16-bit
        outputs = model(images)
        loss = criterion(outputs, labels)  # autocast runs the loss in fp32
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16: scale up so small gradients do not flush to zero
    with run.phase("optimizer"):
        scaler.step(optimizer)  # fp16: unscale, skip the step if a gradient overflowed
        scaler.update()  # fp16: adapt the scale
    run.log_loss(loss)

run.finish()
