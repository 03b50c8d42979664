"""DataLoader recipe, ResNet-18 on CIFAR-10, slow twin: the lab's loader, in the training process.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops made by
torchvision's transforms on PIL images (random-resized-crop, flip, to-tensor, normalize).
`num_workers=0`: the training process decodes and augments every image itself while the GPU waits;
pageable memory: each copy to the GPU is staged and blocks the host.
"""
import torch

from common import data, harness, models

run = harness.start(__file__, __doc__)
model = models.resnet18().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = data.loader(run, data.cifar10_train_dataset(run), num_workers=0)

for images, labels in run.loop(batches):
    with run.phase("copy"):
        images, labels = images.to(run.device), labels.to(run.device)
    with run.phase("forward"):
        outputs = model(images)
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
