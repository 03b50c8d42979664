"""FSDP2 on a machine that has a GPU, with its ranks on the CPU (gloo): torch's accelerator is made to
say CUDA, as it does there. fully_shard left to pick its own mesh takes CUDA and fails; the cookbook's
shard() gives it the run's own device. Prints RESULT ok after a forward and backward."""
import sys

import torch
from torchvision.models.resnet import BasicBlock

from common import distributed
from common.workloads import resnet18

torch._C._get_accelerator = lambda: torch.device("cuda")  # what a GPU machine reports
device, _ = distributed.init(torch.device("cpu"))
model = distributed.shard(resnet18.model(), device, BasicBlock)
model(torch.randn(2, 3, 32, 32)).sum().backward()
if distributed.world()[0] == 0:
    print("RESULT ok", flush=True)
distributed.shut_down()
sys.exit(0)
