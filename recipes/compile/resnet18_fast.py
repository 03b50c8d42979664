"""Compile recipe, ResNet-18 on CIFAR-10, fast twin: compiled training, replayed as CUDA graphs.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused), CrossEntropyLoss, 224 px crops, the
input pipeline on the device; autocast (bf16, or fp16 with a GradScaler below sm_80) and
channels_last in both twins. torch.compile traces forward and backward once (the first steps,
reported apart), fuses BatchNorm + ReLU and the other elementwise chains, and
mode="reduce-overhead" replays each as a CUDA graph: one launch instead of hundreds.
fullgraph=True makes any graph break an error rather than a silent slowdown.
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
# the same parameters; CUDA graphs on a GPU (plain inductor kernels on a CPU); the first steps compile
compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)

for images, labels in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):
        torch.compiler.cudagraph_mark_step_begin()  # a new step: earlier graph outputs may be reused
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
