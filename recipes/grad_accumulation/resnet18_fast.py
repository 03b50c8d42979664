"""Gradient-accumulation recipe, ResNet-18 on CIFAR-10, fast twin: k micro-batches, one step.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops, the input
pipeline on the device, the same batch (256 on a GPU) as 4 micro-batches: each runs its forward and
backward and adds its share of the gradient; one optimizer step follows. Only a micro-batch's
activations are alive at a time; BatchNorm sees micro-batch statistics.
"""
import torch

from common import harness
from common.workloads import resnet18
from recipes.grad_accumulation import ACCUMULATE, micro_batches  # k equal micro-batches per step

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)

for images, labels in run.loop(batches):
    optimizer.zero_grad(set_to_none=True)  # once per step: the micro-batches add into the gradients
    loss = 0.0  # the full batch's mean loss, summed from its parts
    for images_part, labels_part in zip(micro_batches(images), micro_batches(labels)):  # a quarter at a time
        with run.phase("forward"):
            outputs = model(images_part)  # a micro-batch
            part = criterion(outputs, labels_part) / ACCUMULATE  # its share of the full batch's mean loss
        with run.phase("backward"):
            part.backward()  # adds this micro-batch's gradient
        loss = loss + part.detach()  # the full batch's mean loss, for the parity check
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
