"""Compile recipe, ResNet-18 on CIFAR-10, fusion pair, fast twin: compiled training, fused kernels.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused), CrossEntropyLoss, 224 px crops, the
input pipeline on the device; autocast (bf16, or fp16 with a GradScaler below sm_80) and
channels_last in both twins, at the compute-bound batch 256. torch.compile in its default mode
traces forward and backward once (the first steps, reported apart) and Inductor fuses BatchNorm +
ReLU, the residual adds and their backward into generated kernels: less memory traffic per step.
No CUDA graphs: at this batch the launches are not what the GPU waits for.
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
compiled = torch.compile(model, fullgraph=True)  # the same parameters; the first steps compile

for images, labels in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):
        outputs = compiled(images)  # generated, fused kernels
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
    with run.phase("optimizer"):
        scaler.step(optimizer)
        scaler.update()
    run.log_loss(loss)

run.finish()
