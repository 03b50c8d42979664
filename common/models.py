"""The workloads' models: the seed's ProblematicChurnModel, a clean churn MLP, ResNet-18."""
import contextlib

import torch
import torch.nn as nn

HIDDEN_SIZES = (512, 1024, 512, 256, 128)


class ProblematicChurnModel(nn.Module):
    """The seed's deliberately inefficient model, kept as the seed has it: two needless elementwise
    ops before the network and a `.item()` host sync on the output mean in every forward.

    host_sync=False keeps that monitoring statistic on the device instead (`last_mean_activation`,
    a tensor read whenever someone wants it), which is what the sync_removal recipe changes."""

    def __init__(self, input_size, hidden_sizes=HIDDEN_SIZES, host_sync=True):
        super().__init__()
        self.host_sync = host_sync
        self.last_mean_activation = None
        layers = []
        prev_size = input_size
        for hidden_size in hidden_sizes:
            layers.append(nn.Linear(prev_size, hidden_size))
            layers.append(nn.ReLU())
            layers.append(nn.Dropout(0.3))
            prev_size = hidden_size
        layers.append(nn.Linear(prev_size, 1))
        layers.append(nn.Sigmoid())
        self.network = nn.Sequential(*layers)
        self.custom_activation = nn.ReLU()  # unused, as in the seed

    def forward(self, x):
        batch_size = x.size(0)
        x = x + 0.0001  # needless op: a new tensor and a kernel
        x = x * 1.0001  # needless op: another one
        x = self.network(x)
        if batch_size > 1:
            mean_activation = torch.mean(x.detach())
            if self.host_sync:
                mean_activation = mean_activation.item()  # note: this is a sync point (the seed's)
            self.last_mean_activation = mean_activation
        return x


class ChurnMLP(nn.Module):
    """The same layers (and so the same parameters, in the same order) without the extra work."""

    def __init__(self, input_size, hidden_sizes=HIDDEN_SIZES):
        super().__init__()
        layers = []
        prev_size = input_size
        for hidden_size in hidden_sizes:
            layers += [nn.Linear(prev_size, hidden_size), nn.ReLU(), nn.Dropout(0.3)]
            prev_size = hidden_size
        layers += [nn.Linear(prev_size, 1), nn.Sigmoid()]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def resnet18(num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18 from scratch (weights=None: nothing is downloaded)."""
    from torchvision.models import resnet18 as tv_resnet18

    return tv_resnet18(weights=None, num_classes=num_classes)


def resnet18_stages(num_classes: int = 10) -> nn.Sequential:
    """torchvision's ResNet-18 (same modules, same parameters, same forward) as a sequence of its
    stages: stem, layer1..layer4, head. Segment-wise tools such as checkpoint_sequential need this."""
    net = resnet18(num_classes)
    stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    head = nn.Sequential(net.avgpool, nn.Flatten(1), net.fc)
    return nn.Sequential(stem, net.layer1, net.layer2, net.layer3, net.layer4, head)


@contextlib.contextmanager
def batchnorm_stats_kept(module: nn.Module, inner=None):
    """Run `inner` (a context, e.g. a checkpoint's recomputation) with the running statistics of
    every BatchNorm in `module` restored afterwards. A recomputed train-mode BatchNorm updates its
    running mean, variance and count a second time per step (PyTorch issue 96136); the forward has
    already updated them once, so the recomputation must leave them as it found them."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    saved = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
    try:
        with inner if inner is not None else contextlib.nullcontext():
            yield
    finally:  # the recomputation may end early, by an exception (it stops once it has what it needs)
        with torch.no_grad():
            for m, (mean, var, count) in zip(norms, saved):
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
                m.num_batches_tracked.copy_(count)
