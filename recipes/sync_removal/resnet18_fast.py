"""Sync-removal recipe, ResNet-18 on CIFAR-10, fast twin: running sums on the device, read once.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device; the running loss and accuracy are device tensors read once after the loop
(once per epoch in a real training script), so the host stays ahead of the GPU.
"""
import torch

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)
running_loss, correct, seen = torch.zeros((), device=run.device), torch.zeros((), device=run.device), 0  # device sums

for images, labels in run.loop(batches):
    with run.phase("forward"):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.detach()  # queued on the device: no wait
    correct += (outputs.argmax(1) == labels).sum()  # no wait either
    seen += labels.numel()
    run.log_loss(loss)

# one sync each, at the end
print(f"mean training loss {running_loss.item() / run.steps_run:.4f}, training accuracy {correct.item() / seen:.2%}")
run.finish()
