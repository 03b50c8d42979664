"""Cold-start recipe, ResNet-18 on CIFAR-10, slow twin: the whole model compiled from an empty cache.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused on CUDA), CrossEntropyLoss; autocast (bf16,
or fp16 with a GradScaler below sm_80) and channels_last in both twins. torch.compile traces the whole
model's forward into one graph on its first call, AOTAutograd derives its backward, and Inductor
compiles both: one compilation of every block's code, in place, at once.
Both twins start from an empty Inductor and Triton cache (common.compile_cache.fresh).
"""
import torch

from common import compile_cache, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
compile_cache.fresh(run)  # no compiled code from an earlier process: a machine's first run
model = resnet18.model().to(run.device, memory_format=torch.channels_last)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=run.device.type == "cuda")
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run, channels_last=True)
amp_dtype = getattr(torch, run.profile.amp_dtype)  # bf16 from sm_80 (and a CPU); fp16 below (a T4)
scaler = torch.amp.GradScaler(run.device.type, enabled=amp_dtype == torch.float16)  # fp16's loss scale
compiled = torch.compile(model)  # one graph of the whole model, compiled on the first call

for images, labels in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):
        outputs = compiled(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
    with run.phase("optimizer"):
        scaler.step(optimizer)
        scaler.update()
    run.log_loss(loss)

run.finish()
