"""Fault injection for testing the runners on a CPU: COOKBOOK_FAULT="oom:fast" (or "crash:slow:churn", or
"crash:fast:churn:1" for rank 1 of a torchrun launch only) makes the matching variant (and workload,
and rank) fail at its first timed step. It wraps the batch stream,
so nothing of it sits inside the harness's timed loop."""
import os

import torch

from common.env import rank_world

ENV = "COOKBOOK_FAULT"


def planned(variant: str, pair: str, workload: str | None = None) -> str | None:
    """The fault kind ("oom" or "crash") meant for this variant and pair (or its workload), if any."""
    spec = os.environ.get(ENV, "")
    kind, _, target = spec.partition(":")
    want_variant, _, rest = target.partition(":")
    want, _, rank = rest.partition(":")
    if not spec or want_variant != variant or want not in ("", pair, workload):
        return None
    if rank and rank != str(rank_world()[0]):
        return None
    return kind


def wrap(batches, kind: str, at: int):
    """The batches, raising `kind` when batch number `at` (the first timed step) is asked for."""
    for i, batch in enumerate(batches):
        if i == at:
            if kind == "oom":
                raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected by {ENV})")
            raise RuntimeError(f"injected crash ({ENV}={kind})")
        yield batch
