"""Capturing a step as a CUDA graph without changing what it computes: the warm-up that capture
needs, then the state put back as it was, so a graphed twin starts where its eager twin starts."""
import contextlib
import copy

import torch

from common.measure import trainstate


def capture(step, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, run=None, warmup: int = 3):
    """On a CPU there are no CUDA graphs: (None, None), and a notice in the run's result. On CUDA:
    run `step()` `warmup` times on a side stream (capture needs cuBLAS handles, the optimizer's
    state and the allocator's pool to exist already), put the weights and the optimizer's state back
    in place (the same tensors: the graph reads their addresses), then record one `step()` into a
    CUDA graph. Returns (graph, what the recorded step returned): replay() reruns it on whatever the
    static inputs hold, and rewrites those outputs. With a run, all of it is timed as the run's
    "graph capture" setup (run.setup): reported beside torch.compile's compilation, which lands on
    its first step, so the two one-time costs compare (a CPU records its near-zero time too)."""
    with run.setup("graph capture") if run is not None else contextlib.nullcontext():
        return _capture(step, model, optimizer, run, warmup)


def _capture(step, model, optimizer, run, warmup):
    if next(model.parameters()).device.type != "cuda":
        if run is not None:
            run.notices.append("CUDA graphs need CUDA: the fast twin ran its step eagerly on this CPU")
        return None, None
    saved_model = copy.deepcopy(model.state_dict())
    saved_optimizer = trainstate.optimizer_state(optimizer) if optimizer is not None else None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(warmup):
            if i == 0 and run is not None:  # a replay runs no ops to count: count this eager step instead
                from torch.utils.flop_counter import FlopCounterMode

                with FlopCounterMode(display=False) as counter:
                    step()
                run.graph_flops = counter.get_total_flops() or None
            else:
                step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(saved_model[name])
        if optimizer is not None:
            trainstate.restore_optimizer(optimizer, saved_optimizer)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)  # the backward in the graph allocates .grad from its pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def replay(graph, out: torch.Tensor) -> torch.Tensor:
    """Replay the recorded step; a copy of its output (the next replay rewrites the original)."""
    graph.replay()
    return out.clone()
