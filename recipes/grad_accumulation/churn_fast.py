"""Gradient-accumulation recipe, churn MLP on Telco, fast twin: k micro-batches, one step.

The churn MLP (the seed's layers), BCELoss, Adam(lr=1e-3), the same batch (4096 on a GPU) as 4
micro-batches: each runs its forward and backward and adds its share of the gradient; one optimizer
step follows. Only a micro-batch's activations are alive at a time.
"""
import torch

from common import data, harness
from common.workloads import churn
from recipes.grad_accumulation import ACCUMULATE, micro_batches  # k equal micro-batches per step

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)

for x, y in run.loop(batches):
    optimizer.zero_grad(set_to_none=True)  # once per step: the micro-batches add into the gradients
    loss = 0.0  # the full batch's mean loss, summed from its parts
    for x_part, y_part in zip(micro_batches(x), micro_batches(y)):  # a quarter of the activations at a time
        with run.phase("forward"):
            probs = model(x_part).squeeze(1)  # a micro-batch
            part = criterion(probs, y_part) / ACCUMULATE  # its share of the full batch's mean loss
        with run.phase("backward"):
            part.backward()  # adds this micro-batch's gradient
        loss = loss + part.detach()  # the full batch's mean loss, for the parity check
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
