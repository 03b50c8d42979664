"""Compile recipe, churn MLP on Telco, slow twin: eager serving.

The churn MLP (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1) in eval mode under inference_mode answers
batches of 512 requests from the test split; each batch's probabilities go back to the host, as a
caller needs them. Eager PyTorch launches each layer's kernels one by one from Python. The weights
are trained, the same in every process, so that parity can compare each customer's answer.
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

with torch.inference_mode():
    for (x,) in run.loop(batches):
        with run.phase("forward"):
            probs = model(x).squeeze(1)
        answer = probs.cpu()  # back to the caller: a sync in both twins, part of the latency
        run.log_output(answer)

run.finish()
