"""DataLoader recipe, ResNet-18 on CIFAR-10, slow twin: the lab's loader, in the training process.

ResNet-18 (10 classes, weights=None), Adam(lr=1e-4), CrossEntropyLoss, 224 px crops made by
torchvision's transforms on PIL images (random-resized-crop, flip, to-tensor, normalize).
`num_workers=0`: the training process decodes and augments every image itself while the GPU waits;
pageable memory: each copy to the GPU is staged and blocks the host.
"""
import torch

from common import data, harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = data.loader(run, resnet18.train_dataset(run), num_workers=0)

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
