"""Compile recipe, churn MLP on Telco, fast twin: compiled serving with CUDA graphs.

The churn MLP (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1) in eval mode under inference_mode answers
batches of 512 requests from the test split; each batch's probabilities go back to the host, as a
caller needs them. torch.compile(mode="reduce-overhead") fuses the elementwise ops into the matmuls'
neighbours and replays the whole forward as one CUDA graph: one launch instead of one per kernel.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
requests = churn.requests(run)
model = churn.ChurnMLP(requests.shape[1])
model.load_state_dict(churn.trained_weights(run, churn.ChurnMLP))  # trained: answers differ customer to customer
model = model.to(run.device).eval()
# inductor's kernels, replayed as one CUDA graph (GPU); fullgraph: a graph break would be an error
model = torch.compile(model, mode="reduce-overhead", fullgraph=True)
batches = data.device_batches(run, requests)

with torch.inference_mode():
    for (x,) in run.loop(batches):
        with run.phase("forward"):
            probs = model(x).squeeze(1)
        answer = probs.cpu()  # back to the caller: a sync in both twins, part of the latency
        run.log_output(answer)

run.finish()
