"""Ladder, ResNet-18 training: from the lab's naive baseline to every technique together.

ResNet-18 (10 classes, weights=None) on CIFAR-10 with 224 px random-resized crops and flips,
Adam(lr=1e-4), CrossEntropyLoss. `--rung N` switches on the first N techniques of
ladder.RUNGS["resnet18"]; see `make ladder`.
"""
import torch

from common import data, harness, models
from ladder import rung_flag, techniques
from recipes.dataloader import workers

run = harness.start(__file__, __doc__, extend=rung_flag("resnet18"))
on = techniques("resnet18", run.args.rung).__contains__
cuda = run.device.type == "cuda"

model = models.resnet18().to(run.device)
if on("channels_last"):
    model = model.to(memory_format=torch.channels_last)  # NHWC: what tensor-core convolutions want
if on("fused Adam"):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=cuda, foreach=not cuda)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
forward = torch.compile(model) if on("torch.compile") else model
criterion = torch.nn.CrossEntropyLoss()
amp_dtype = torch.bfloat16 if not cuda or torch.cuda.is_bf16_supported() else torch.float16

if on("GPU input pipeline"):
    batches = data.cifar10_train_batches(run)  # uint8 images on the device, augmented there in batches
elif on("loader workers"):
    batches = data.loader(run, data.cifar10_train_dataset(run), num_workers=workers(), pin_memory=cuda,
                          persistent_workers=True, prefetch_factor=4)
else:
    batches = data.loader(run, data.cifar10_train_dataset(run), num_workers=0)  # the lab's loader
syncs = not on("no per-step syncs")
running_loss, correct, seen = (0.0, 0, 0) if syncs else (torch.zeros((), device=run.device),
                                                          torch.zeros((), device=run.device), 0)

for images, labels in run.loop(batches):
    with run.phase("copy"):
        images = images.to(run.device, non_blocking=on("loader workers"))  # a no-op on the GPU pipeline
        labels = labels.to(run.device, non_blocking=on("loader workers"))
        if on("channels_last"):
            images = images.contiguous(memory_format=torch.channels_last)
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype, enabled=on("AMP (bf16)")):
        outputs = forward(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    if syncs:
        running_loss += loss.item()  # note: a sync point every step
        correct += (outputs.argmax(1) == labels).sum().item()  # note: and another
    else:
        running_loss += loss.detach()
        correct += (outputs.argmax(1) == labels).sum()
    seen += labels.numel()
    run.log_loss(loss)

run.extra.update(rung=run.args.rung, train_accuracy=float(correct) / seen)
run.finish()
