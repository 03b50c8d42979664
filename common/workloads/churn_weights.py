"""Trained churn MLP weights for the serving pairs: answers that differ from request to request.

An untrained MLP answers about 0.5 for every customer, so a twin that answers the wrong customer, or
an earlier batch, would agree with the right answers to within 1e-4. Trained the seed's way (Adam
1e-3, BCELoss, batch 64) for a few epochs on the train split, on the CPU with a seed of its own, once
per split and torch version: every process then serves the same weights, read from the cache.
"""
import hashlib
import inspect
import io
from pathlib import Path

import torch

from common import env
from common.files import atomic_write_bytes

EPOCHS, BATCH, LR, SEED = 3, 64, 1e-3, 0


def trained(X_train: torch.Tensor, y_train: torch.Tensor, model_factory) -> dict:
    """The state dict of model_factory(n_features) trained on (X_train, y_train); cached on disk."""
    cache = _cache_path(X_train, y_train, model_factory)
    if cache.is_file():
        try:
            return torch.load(cache, weights_only=True)
        except (OSError, RuntimeError, EOFError):  # a torn or foreign file: trained anew below
            pass
    with torch.random.fork_rng(devices=[]):  # the caller's seeds stay as they were
        torch.manual_seed(SEED)
        model = model_factory(X_train.shape[1]).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        criterion = torch.nn.BCELoss()
        X, y = X_train.float().cpu(), y_train.float().cpu().reshape(-1, 1)
        for _ in range(EPOCHS):
            for idx in torch.randperm(len(X)).split(BATCH):
                optimizer.zero_grad(set_to_none=True)
                criterion(model(X[idx]), y[idx]).backward()
                optimizer.step()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(cache, buf.getvalue())  # whole or not at all: twins may load at once
    return state


def _cache_path(X_train: torch.Tensor, y_train: torch.Tensor, model_factory) -> Path:
    """A digest of the split, the model's code, this module's and torch's version: a change to any
    trains anew."""
    digest = hashlib.sha256(X_train.cpu().numpy().tobytes())
    digest.update(y_train.cpu().numpy().tobytes())
    digest.update(inspect.getsource(model_factory).encode())
    digest.update(Path(__file__).read_bytes())
    digest.update(torch.__version__.encode())
    return env.data_dir() / "churn-weights" / f"{digest.hexdigest()[:24]}.pt"
