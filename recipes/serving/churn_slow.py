"""Serving recipe, slow twin: the seed's churn model behind an HTTP endpoint, one forward per request.

Both twins: the trained weights, FastAPI on uvicorn at 127.0.0.1, one model thread fed by a bounded
queue (common/server.py: the endpoint, its 422s and 503s, the drain at Ctrl-C). What differs is what
the model thread runs. Here, the seed's serving code as it is: its model (two needless ops, `.item()`
in a forward of 2+ rows), eager, autograd recording, each request its own forward however many wait.
"""
import torch

from common import server
from common.workloads import churn

MAX_BATCH, MAX_WAIT_MS = 1, 0.0  # a forward per request: the first one waiting is the batch


def load(ctx):
    model = churn.ProblematicChurnModel(ctx.n_features)  # the seed's model as it wrote it
    model.load_state_dict(ctx.weights)
    model = model.to(ctx.device).eval()

    def predict(rows):  # the customers of the requests the model thread took
        with torch.enable_grad():  # the seed's code: autograd records every forward
            return model(rows.to(ctx.device)).squeeze(1).detach().cpu()  # note: .cpu() is a sync point

    return predict


server.serve(__file__, load, MAX_BATCH, MAX_WAIT_MS)
