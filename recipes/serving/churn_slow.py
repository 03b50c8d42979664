"""Serving recipe, slow twin: the seed's churn model behind an HTTP endpoint, one forward per request.

The seed's model as it wrote it (models.ProblematicChurnModel: two needless elementwise ops, a
`.item()` on the output mean in every forward of more than one row), in eval mode, with the trained
weights both twins load. Each request is its own eager forward, autograd still recording, and its
answers come back to the host: no batching, however many requests wait. common/server.py holds what
both twins share (the endpoint, its 422s and 503s, the model thread, the drain).
"""
from common import models, server


def load(ctx):
    model = models.ProblematicChurnModel(ctx.n_features)
    model.load_state_dict(ctx.weights)
    model = model.to(ctx.device).eval()

    def predict(rows):  # one request's customers
        return model(rows.to(ctx.device)).squeeze(1).detach().cpu()  # note: .cpu() is a sync point

    return predict


server.serve(__file__, load, max_batch=1)  # a forward per request: the first one is the batch
