"""Cold-start recipe, ResNet-18 on CIFAR-10, fast twin: the whole model compiled, with the compiled
artefacts an earlier process saved loaded before the first step.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4, fused on CUDA), CrossEntropyLoss; autocast (bf16,
or fp16 with a GradScaler below sm_80) and channels_last in both twins. Both twins start from an
empty Inductor and Triton cache (common.compile_cache.fresh); this one then loads the mega-cache an
earlier process saved with torch.compiler.save_cache_artifacts() (Inductor's compiled graphs with
their Triton kernels, AOTAutograd's, autotuning's: common.compile_cache.Artefacts) with
torch.compiler.load_cache_artifacts(), so its first call finds them instead of generating them. A
file built by another torch, CUDA, Triton, GPU or CPU instruction set, or for another batch, image
size or autocast dtype, is refused in one line.
"""
import torch

from common import compile_cache, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
compile_cache.fresh(run)  # no compiled code from an earlier process: a machine's first run
artefacts = compile_cache.Artefacts(run)  # data/compile_artefacts/<pair>-<device>.bin, for this graph
with run.setup("compile cache"):  # one-time work: counted with compilation in the first step
    artefacts.load()  # torch.compiler.load_cache_artifacts(): what an earlier process compiled
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

artefacts.save()  # torch.compiler.save_cache_artifacts(), for the next process (unless the loaded ones served)
run.extra["compile_cache"] = artefacts.state  # loaded or why not, its size: for the report
run.finish()
