"""CUDA-graphs recipe, churn MLP on Telco, fast twin: the whole step recorded once, replayed.

The churn MLP (the seed's layers), BCELoss, Adam(lr=1e-3), batch 64. Forward, backward and Adam
are recorded into one CUDA graph over static input buffers; a step copies its batch in and replays
the graph: one launch, none of the host's per-op work (on a CPU, the same step runs eagerly).
"""
import torch

from common import data, graphs, harness  # graphs: capture a step, replay it
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
cuda = run.device.type == "cuda"  # CUDA graphs need CUDA; a CPU runs the step itself
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=cuda)  # its step count on the GPU: capturable
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)
static_x = torch.zeros(run.batch_size, features.shape[1], device=run.device)  # the graph reads its batch here
static_y = torch.zeros(run.batch_size, device=run.device)  # ... and its targets here


def step(x, y):  # one training step
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    return loss


# warm up, put weights and Adam's state back, then record one step on the static buffers (GPU only)
graph, static_loss = graphs.capture(lambda: step(static_x, static_y), model, optimizer, run)
for x, y in run.loop(batches):
    if cuda:  # the graph reads its inputs from fixed addresses
        static_x.copy_(x), static_y.copy_(y)  # the batch into the graph's input buffers
    run.log_loss(graphs.replay(graph, static_loss) if cuda else step(x, y))  # one launch for the whole step

run.finish()
