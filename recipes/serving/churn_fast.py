"""Serving recipe, fast twin: the same endpoint, requests gathered into micro-batches, compiled ahead of time.

The seed's model with the trained weights both twins load, served as a serving engineer would:
the model thread gathers waiting requests into one forward (up to 64 rows, waiting at most 2 ms for
company after the first), the model runs under inference_mode with its monitoring statistic kept
on the device (no `.item()` per forward), and it is exported with a dynamic batch (torch.export)
and compiled ahead of time by AOTInductor before the server starts: no request pays compilation.
common/server.py holds what both twins share (the endpoint, its 422s and 503s, the model thread,
the drain).
"""
import torch

from common import models, server

MAX_BATCH, MAX_WAIT_MS = 64, 2.0


def load(ctx):
    model = models.ProblematicChurnModel(ctx.n_features, host_sync=False)  # the statistic stays on the device
    model.load_state_dict(ctx.weights)
    model = model.to(ctx.device).eval()
    compiled = server.aot_compiled(model, ctx, MAX_BATCH)  # torch.export + AOTInductor, cached on disk

    def predict(rows):  # a micro-batch of requests' customers
        with torch.inference_mode():  # no autograd bookkeeping
            return compiled(rows.to(ctx.device)).squeeze(1).cpu()  # note: .cpu() is a sync point

    return predict


server.serve(__file__, load, max_batch=MAX_BATCH, max_wait_ms=MAX_WAIT_MS)
