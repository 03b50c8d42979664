"""CUDA-graphs recipe, churn serving, fast twin: one hand-captured CUDA graph per batch.

The churn MLP (the seed's layers) in eval mode under inference_mode answers batches of 512 requests
from the test split; each batch's probabilities go back to the host, as a caller needs them. The
forward is recorded once into a CUDA graph over a static input buffer: a batch is one copy in, one
replay, and the answers back to the caller as the slow twin returns them (a CPU runs it eagerly).
"""
import torch

from common import data, graphs, harness  # graphs: capture a step, replay it
from common.workloads import churn

run = harness.start(__file__, __doc__)
requests = churn.requests(run)
model = churn.ChurnMLP(requests.shape[1])
model.load_state_dict(churn.trained_weights(run, churn.ChurnMLP))  # trained: answers differ customer to customer
model = model.to(run.device).eval()
batches = data.device_batches(run, requests)
cuda = run.device.type == "cuda"  # CUDA graphs need CUDA; a CPU runs the step itself
static_x = torch.zeros(run.batch_size, requests.shape[1], device=run.device)  # the graph reads its requests here


def serve(x):  # one batch of requests
    with run.phase("forward"):
        probs = model(x).squeeze(1)
    return probs.cpu()  # back to the caller: a sync, part of the latency


with torch.inference_mode():
    # warm up, then record the forward once on the static buffer (GPU only)
    graph, static_probs = graphs.capture(lambda: model(static_x).squeeze(1), model, run=run)
    for (x,) in run.loop(batches):
        if cuda:  # copy in, replay
            static_x.copy_(x)  # the requests into the graph's input buffer
            graph.replay()  # one launch: every layer
        run.log_output(static_probs.cpu() if cuda else serve(x))  # back to the caller, as the slow twin does

run.finish()
