"""Baseline: the seed's churn exercise end to end, as naively as the seed wrote it.

The ProblematicChurnModel (needless elementwise ops, a `.item()` sync in every forward) trained for
5 epochs at batch 64 from a DataLoader over CPU tensors, `loss.item()` every step; then the seed's
inference study: DataLoaders over the test set at batch sizes 32-1024, latency per batch size
(mean, std, p95) with NVML sampling, and the sweet spot found from the data. `make diagnose-churn`
runs this with per-phase timing and writes reports/baseline_churn.md.
"""
import torch
from torch.utils.data import TensorDataset

from baselines import inference_sweep
from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
X_train, X_test, y_train, y_test = churn.splits(run)  # CPU tensors, as the seed keeps them
model = churn.ProblematicChurnModel(X_train.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.loader(run, TensorDataset(X_train, y_train))  # shuffled, batch 64, in the training process
running_loss = 0.0

for x, y in run.loop(batches):
    with run.phase("copy"):
        x, y = x.to(run.device), y.to(run.device)
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad()
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.item()  # note: a sync point every step, as in the seed
    run.log_loss(loss)

epochs = run.steps_run * run.batch_size / len(X_train)
print(f"trained {epochs:.1f} epochs, mean loss {running_loss / run.steps_run:.4f}; inference sweep:")
sweep_sizes = (8, 16, 32) if run.smoke else inference_sweep.BATCH_SIZES
passes = 1 if run.smoke else 5
run.extra["inference"] = inference_sweep.latency_sweep(model, X_test, run.device, sweep_sizes, passes=passes)
run.extra["epochs"] = epochs
with torch.no_grad():
    test_probs = model.eval()(X_test.to(run.device)).squeeze(1).cpu()
run.extra["test_accuracy"] = ((test_probs > 0.5).float() == y_test).float().mean().item()
run.finish()
