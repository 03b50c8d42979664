"""Serving recipe, fast twin: the same endpoint, requests gathered into micro-batches, compiled ahead of time.

Both twins: the trained weights, FastAPI on uvicorn at 127.0.0.1, one model thread fed by a bounded
queue (common/server.py: the endpoint, its 422s and 503s, the drain at Ctrl-C). What differs is what
the model thread runs. Here, what a serving engineer does: waiting requests batched, inference_mode,
no `.item()` in the model, the model exported and compiled by AOTInductor before the server starts.
"""
import torch

from common import server
from common.workloads import churn

MAX_BATCH, MAX_WAIT_MS = 64, 2.0  # waiting requests in one forward: up to 64 rows, 2 ms for company


def load(ctx):
    model = churn.ProblematicChurnModel(ctx.n_features, host_sync=False)  # no .item(): export keeps the answer
    model.load_state_dict(ctx.weights)
    model = model.to(ctx.device).eval()
    compiled = server.aot_compiled(model, ctx, MAX_BATCH)  # torch.export + AOTInductor, built before serving

    def predict(rows):  # the customers of the requests the model thread took
        with torch.inference_mode():  # no autograd bookkeeping
            return compiled(rows.to(ctx.device)).squeeze(1).cpu()  # note: .cpu() is a sync point

    return predict


server.serve(__file__, load, MAX_BATCH, MAX_WAIT_MS)
