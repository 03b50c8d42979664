"""Baseline: the lab's ResNet-18 on CIFAR-10, as naively as the lab wrote it.

torchvision ResNet-18 (10 classes, weights=None) trained in fp32 with Adam(lr=1e-4) at batch 32;
CIFAR-10 through torchvision's transforms on PIL images (random-resized-crop to 224 px, flip,
normalize) in a DataLoader with `num_workers=0` and no pinning; the running loss and accuracy read
with `.item()` every step. Reports throughput, the epoch time this pace implies, peak memory and
the training accuracy. `make diagnose-resnet18` runs this with per-phase timing and writes
reports/baseline_resnet18.md.
"""
import torch

from common import data, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
dataset = resnet18.train_dataset(run)
batches = data.loader(run, dataset, num_workers=0, pin_memory=False)
running_loss, correct, seen = 0.0, 0, 0

for images, labels in run.loop(batches):
    with run.phase("copy"):
        images, labels = images.to(run.device), labels.to(run.device)
    with run.phase("forward"):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad()
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.item()  # note: a sync point every step, as in the lab
    correct += (outputs.argmax(1) == labels).sum().item()  # note: and another
    seen += labels.numel()
    run.log_loss(loss)

result = run.finish_timing()
steps_per_epoch = len(dataset) // run.batch_size
run.extra.update(train_accuracy=correct / seen, mean_loss=running_loss / run.steps_run, steps_per_epoch=steps_per_epoch,
                 epoch_s_estimate=steps_per_epoch * result.summary.median_ms / 1000.0)
print(f"training accuracy {correct / seen:.2%} over {seen} images; one epoch ({steps_per_epoch} steps) at this pace: "
      f"{run.extra['epoch_s_estimate']:.0f} s")
run.finish()
