"""Cold-start recipe, ResNet-18 on CIFAR-10, fast twin: each BasicBlock compiled in place (regional).

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused on CUDA), CrossEntropyLoss; autocast (bf16,
or fp16 with a GradScaler below sm_80) and channels_last in both twins. Each BasicBlock is compiled in
place (`block.compile()`); the eight blocks share one code object, so Dynamo serves a block whose
configuration it has seen with the code it compiled for the first (layer1's second block). Parameter
shapes are static, so each other configuration (four widths, three with a downsampling branch)
compiles anew, and from the third on the activation's height and width are dynamic: seven compilations
of a block against one of the whole model. The stem and the head run eagerly, and every block boundary
is a graph boundary, which may cost some speed per step.
Both twins start from an empty Inductor and Triton cache (common.compile_cache.fresh).
"""
import torch
from torchvision.models.resnet import BasicBlock  # the repeated block

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
torch._dynamo.config.fail_on_recompile_limit_hit = True  # 7 of the 8 compilations a code object may have: more
for block in (m for m in model.modules() if isinstance(m, BasicBlock)):  # regional compilation:
    block.compile()  # each block compiled in place; its forward's code compiled once, reused by the others
compiled = model  # the blocks compiled in place, the stem and head eager

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
