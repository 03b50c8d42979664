"""Ladder, ResNet-18 training: from the lab's naive baseline to every technique together.

ResNet-18 (10 classes, weights=None) on CIFAR-10 with 224 px random-resized crops and flips,
Adam(lr=1e-4), CrossEntropyLoss. `--rung N` (or an id) switches on the techniques of
ladder.LADDERS["resnet18"] up to that rung; see `make ladder`.
"""
import torch

from common import data, harness
from common.workloads import resnet18
from ladder import rung_flag, switches
from ladder.techniques import (
    adam,
    apply_channels_last,
    apply_compile,
    apply_cudnn_benchmark,
    autocast,
    channels_last_input,
    grad_scaler,
)
from recipes.dataloader import workers

run = harness.start(__file__, __doc__, extend=rung_flag("resnet18"))
on = switches("resnet18", run.args.rung, run.profile)  # a technique this device lacks stays off
cuda = run.device.type == "cuda"

model = resnet18.model().to(run.device)
if on("channels_last"):
    model = apply_channels_last(model)
optimizer = adam(model.parameters(), run.device, fused=on("fused_adam"), lr=1e-4)
apply_cudnn_benchmark(on("cudnn_benchmark"))
mode = "reduce-overhead" if on("cuda_graphs") else None
forward = apply_compile(model, mode) if on("compile") else model
criterion = torch.nn.CrossEntropyLoss()
scaler = grad_scaler(run, enabled=on("amp"))

if on("gpu_input"):
    batches, loader_workers = resnet18.train_batches(run), 0  # uint8 images on the device, augmented there
elif on("loader_workers"):
    loader_workers = workers(run)
    batches = data.loader(run, resnet18.train_dataset(run), num_workers=loader_workers, pin_memory=cuda,
                          persistent_workers=True, prefetch_factor=4)
else:
    batches, loader_workers = data.loader(run, resnet18.train_dataset(run), num_workers=0), 0  # the lab's loader
syncs = not on("no_step_syncs")
running_loss, correct, seen = (0.0, 0, 0) if syncs else (torch.zeros((), device=run.device),
                                                          torch.zeros((), device=run.device), 0)

for images, labels in run.loop(batches):
    with run.phase("copy"):
        images = images.to(run.device, non_blocking=on("loader_workers"))  # a no-op on the GPU pipeline
        labels = labels.to(run.device, non_blocking=on("loader_workers"))
        if on("channels_last"):
            images = channels_last_input(images)
    with run.phase("forward"), autocast(run, on("amp")):
        if on("cuda_graphs"):
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the graphs' earlier outputs may be reused
        outputs = forward(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16 only: scaled so small gradients survive
    with run.phase("optimizer"):
        scaler.step(optimizer)
        scaler.update()
    if syncs:
        running_loss += loss.item()  # note: a sync point every step
        correct += (outputs.argmax(1) == labels).sum().item()  # note: and another
    else:
        running_loss += loss.detach()
        correct += (outputs.argmax(1) == labels).sum()
    seen += labels.numel()
    run.log_loss(loss)

run.extra["observed"] = {"loader_workers": loader_workers,
                         "channels_last": images.is_contiguous(memory_format=torch.channels_last),
                         "autocast_dtype": str(outputs.dtype), "autocast_16bit": outputs.dtype != torch.float32,
                         "compiled": forward is not model,
                         "cudnn_benchmark": torch.backends.cudnn.benchmark, "compile_mode": mode}
run.extra.update(rung=run.args.rung, train_accuracy=float(correct) / seen)
run.finish()
