"""CUDA-graphs recipe, churn serving, slow twin: an eager forward per batch of requests.

The churn MLP (the seed's layers) in eval mode under inference_mode answers batches of 512 requests
from the test split; each batch's probabilities go back to the host, as a caller needs them. The
host launches each layer's kernels one by one, then waits for the copy back.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
requests = churn.requests(run)
model = churn.ChurnMLP(requests.shape[1])
model.load_state_dict(churn.trained_weights(run, churn.ChurnMLP))  # trained: answers differ customer to customer
model = model.to(run.device).eval()
batches = data.device_batches(run, requests)


def serve(x):  # one batch of requests
    with run.phase("forward"):
        probs = model(x).squeeze(1)
    return probs.cpu()  # back to the caller: a sync, part of the latency


with torch.inference_mode():
    for (x,) in run.loop(batches):
        run.log_output(serve(x))

run.finish()
