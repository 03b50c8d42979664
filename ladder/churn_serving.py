"""Ladder, churn serving: from the seed's naive inference to every technique together.

Batches of 512 requests from the Telco test split; each batch's probabilities are copied back to
the host (a caller needs them), so a step is the latency a caller sees. `--rung N` (or an id)
switches on the techniques of ladder.LADDERS["churn"] up to that rung; see `make ladder`.
"""
import torch
from torch.utils.data import TensorDataset

from common import data, graphs, harness
from common.workloads import churn
from ladder import rung_flag, switches
from ladder.techniques import apply_compile, inference_context

run = harness.start(__file__, __doc__, extend=rung_flag("churn"))
on = switches("churn", run.args.rung, run.profile)  # a technique this device lacks stays off
_, X_test, _, _ = churn.splits(run)

if on("ops_folded"):
    X_test = (X_test + 0.0001) * 1.0001  # the forward's two needless ops, applied once to the data
    model = churn.ChurnMLP(X_test.shape[1])
else:
    model = churn.ProblematicChurnModel(X_test.shape[1], host_sync=not on("no_host_syncs"))
model = model.to(run.device).eval()
if on("cuda_graphs") and not on("hand_graph"):
    model = apply_compile(model, mode="reduce-overhead")  # CUDA graphs on GPU (plain Inductor on CPU)
if on("device_batching"):
    requests = data.device_batches(run, X_test.to(run.device))  # the requests live on the device
else:
    requests = data.loader(run, TensorDataset(X_test))  # the seed: a DataLoader over CPU tensors
graph = None

with inference_context(on("inference_mode")):
    if on("hand_graph"):  # one graph of the forward on a static buffer; answers into a page-locked buffer
        static_x = torch.zeros(run.batch_size, X_test.shape[1], device=run.device)
        answer = torch.empty(run.batch_size, pin_memory=run.device.type == "cuda")
        graph, static_probs = graphs.capture(lambda: model(static_x).squeeze(1), model, run=run)
    run.extra["observed"] = {"inference_mode": torch.is_inference_mode_enabled(),
                             "compiled": hasattr(model, "_orig_mod") or graph is not None,
                             "answer_buffer": "preallocated" if on("hand_graph") else "per batch"}
    for (x,) in run.loop(requests):
        with run.phase("copy"):
            x = x.to(run.device)  # a no-op once the requests live on the device
            if graph is not None:
                static_x.copy_(x)
        with run.phase("forward"):
            if graph is not None:
                graph.replay()  # one launch for every layer
            else:
                probs = model(x).squeeze(1)
        if graph is not None:
            answer.copy_(static_probs, non_blocking=True)
            torch.cuda.synchronize()  # note: the one sync, part of the latency on every rung
        elif on("hand_graph"):
            answer.copy_(probs)  # on a CPU: no graph, the same buffer
        else:
            answer = probs.cpu()  # back to the caller: the latency includes it on every rung
        run.log_output(answer)

run.extra["rung"] = run.args.rung
run.finish()
