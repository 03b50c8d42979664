"""Sync-removal recipe, ResNet-18 on CIFAR-10, slow twin: per-step `.item()` metrics.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device; the lab's running loss and accuracy read with `.item()` every step, so the
host waits for each step to finish before it can queue the next.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)
running_loss, correct, seen = 0.0, 0, 0

for images, labels in run.loop(batches):
    with run.phase("forward"):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.item()  # note: this is a sync point, every step
    correct += (outputs.argmax(1) == labels).sum().item()  # note: and another one
    seen += labels.numel()
    run.log_loss(loss)

print(f"mean training loss {running_loss / run.steps_run:.4f}, training accuracy {correct / seen:.2%}")
run.finish()
