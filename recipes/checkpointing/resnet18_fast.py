"""Checkpointing recipe, ResNet-18 on CIFAR-10, fast twin: activations recomputed stage by stage.

ResNet-18 (10 classes, weights=None) as its six stages (stem, layer1-4, head), Adam(lr=1e-4),
CrossEntropyLoss, 224 px crops. The input pipeline lives on the device so the pair measures the
memory/compute trade and nothing else.
"""
import torch
from torch.utils.checkpoint import checkpoint_sequential  # keeps only segment inputs

from common import data, harness, models

run = harness.start(__file__, __doc__)
model = models.resnet18_stages().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = data.cifar10_train_batches(run)

for images, labels in run.loop(batches):
    with run.phase("forward"):
        # one segment per stage: stem and layer1-4 store only their input and rerun in backward
        outputs = checkpoint_sequential(model, 6, images, use_reentrant=False)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
