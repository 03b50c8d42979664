"""A deterministic data-parallel step for the parity test: a linear model (no dropout, no BatchNorm),
the global batch of 64 rows split into ranks x 4 micro-batches, DDP's all-reduce once per step
(no_sync), 5 SGD steps; prints the parameters' fingerprint. Under torchrun with N ranks and as one
plain process (the whole global batch), the results must agree to rounding."""
import json
import sys

import torch

from common import distributed

K = 4
rank, world = distributed.world()
device = torch.device("cpu")
if world > 1:
    distributed.init(device)
torch.manual_seed(0)
model = distributed.wrap(torch.nn.Linear(16, 1), device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(1)
for _ in range(5):
    x, y = torch.randn(64, 16, generator=data), torch.randn(64, 1, generator=data)
    optimizer.zero_grad()
    for i, (xp, yp) in enumerate(zip(*(t.chunk(K) for t in distributed.rank_share(x, y)))):
        with distributed.no_sync(model, unless=i == K - 1):
            (torch.nn.functional.mse_loss(model(xp), yp) / K).backward()
    optimizer.step()
found = {"rank": rank, "digest": distributed.digest(distributed.WRAPPED[0]),
         "fingerprint": distributed.fingerprint(distributed.WRAPPED[0]),
         "allreduces": distributed.COUNTED[0].calls if distributed.COUNTED else 0}
print("RESULT " + json.dumps(found), flush=True)
distributed.shut_down()
sys.exit(0)
