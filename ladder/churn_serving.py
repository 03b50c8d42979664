"""Ladder, churn serving: from the seed's naive inference to every technique together.

Batches of 512 requests from the Telco test split; each batch's probabilities are copied back to
the host (a caller needs them), so a step is the latency a caller sees. `--rung N` (or an id)
switches on the techniques of ladder.LADDERS["churn"] up to that rung; see `make ladder`.
"""
import torch
from torch.utils.data import TensorDataset

from common import data, harness, models
from ladder import apply_compile, inference_context, rung_flag, switches

run = harness.start(__file__, __doc__, extend=rung_flag("churn"))
on = switches("churn", run.args.rung)
_, X_test, _, _ = data.churn_splits(run)

if on("ops_folded"):
    X_test = (X_test + 0.0001) * 1.0001  # the forward's two needless ops, applied once to the data
    model = models.ChurnMLP(X_test.shape[1])
else:
    model = models.ProblematicChurnModel(X_test.shape[1], host_sync=not on("no_host_syncs"))
model = model.to(run.device).eval()
if on("cuda_graphs"):
    model = apply_compile(model, mode="reduce-overhead")  # CUDA graphs on GPU (plain Inductor on CPU)
if on("device_batching"):
    requests = data.device_batches(run, X_test.to(run.device))  # the requests live on the device
else:
    requests = data.loader(run, TensorDataset(X_test))  # the seed: a DataLoader over CPU tensors

with inference_context(on("inference_mode")):
    run.extra["observed"] = {"inference_mode": torch.is_inference_mode_enabled(),
                             "compiled": hasattr(model, "_orig_mod")}
    for (x,) in run.loop(requests):
        with run.phase("copy"):
            x = x.to(run.device)  # a no-op once the requests live on the device
        with run.phase("forward"):
            probs = model(x).squeeze(1)
        answer = probs.cpu()  # back to the caller: the latency includes it on every rung
        run.log_output(answer)

run.extra["rung"] = run.args.rung
run.finish()
