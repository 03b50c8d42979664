"""Ladder, churn serving: from the seed's naive inference to every technique together.

Batches of 512 requests from the Telco test split; each batch's probabilities are copied back to
the host (a caller needs them), so a step is the latency a caller sees. `--rung N` switches on the
first N techniques of ladder.RUNGS["churn"]; see `make ladder`.
"""
import torch
from torch.utils.data import TensorDataset

from common import data, harness, models
from ladder import rung_flag, techniques

run = harness.start(__file__, __doc__, extend=rung_flag("churn"))
on = techniques("churn", run.args.rung).__contains__
_, X_test, _, _ = data.churn_splits(run)

if on("ops folded"):
    X_test = (X_test + 0.0001) * 1.0001  # the forward's two needless ops, applied once to the data
    model = models.ChurnMLP(X_test.shape[1])
else:
    model = models.ProblematicChurnModel(X_test.shape[1], host_sync=not on("no host syncs"))
model = model.to(run.device).eval()
if on("CUDA graphs"):
    model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs on GPU (plain Inductor on CPU)
if on("device batching"):
    requests = data.device_batches(run, X_test.to(run.device))  # the requests live on the device
else:
    requests = data.loader(run, TensorDataset(X_test))  # the seed: a DataLoader over CPU tensors
no_autograd = torch.inference_mode if on("inference_mode") else torch.no_grad

with no_autograd():
    for (x,) in run.loop(requests):
        with run.phase("copy"):
            x = x.to(run.device)  # a no-op once the requests live on the device
        with run.phase("forward"):
            probs = model(x).squeeze(1)
        answer = probs.cpu()  # back to the caller: the latency includes it on every rung
        run.log_output(answer)

run.extra["rung"] = run.args.rung
run.finish()
