"""DDP recipe, churn MLP on Telco, slow twin: the gradients all-reduced after every micro-batch.

Each rank (torchrun --standalone --nproc-per-node N) trains the churn MLP (BCELoss, Adam(lr=1e-3))
wrapped in DistributedDataParallel on its share of the global batch (256 on a GPU), as 4
micro-batches whose gradients add up before one optimizer step. What a first attempt writes: every
micro-batch's backward all-reduces the gradients, so a step runs 4 all-reduces where 1 would do.
"""
import torch

from common import data, distributed, harness
from common.workloads import churn
from recipes.ddp import MICRO_BATCHES, rank_micro_batches  # this rank's share, in 4 micro-batches

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = distributed.wrap(churn.ChurnMLP(features.shape[1]).to(run.device), run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)  # the global batch, alike on every rank

for x, y in run.loop(batches):
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0  # this rank's share of the global batch's mean loss
    for x_part, y_part in rank_micro_batches((x, y)):
        with run.phase("forward"):
            part = criterion(model(x_part).squeeze(1), y_part) / MICRO_BATCHES
        with run.phase("backward"):
            part.backward()  # DDP all-reduces the gradients after each micro-batch
        loss = loss + part.detach()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
