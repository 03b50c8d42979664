"""A script's training state, saved and written back into the same tensors: what its optimizers hold
(the parameters, their gradients, the optimizers' own state). Written back in place, because a
compiled model or a captured CUDA graph reads those tensors at their addresses.

The learning probe (stages.probed) runs from a saved state and puts it back, so that its steps do not
bend the run's trajectory; common.graphs puts an optimizer back after the warm-up capture needs."""
import copy
import weakref
from dataclasses import dataclass

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook


class Stepped:
    """The optimizers that have stepped in this process since this was made (a global step hook: the
    harness never sees the script's objects)."""

    def __init__(self):
        seen = self._seen = weakref.WeakSet()
        self._handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: seen.add(optimizer))

    def __iter__(self):
        return iter(list(self._seen))

    def close(self) -> None:
        self._handle.remove()


def _copied(value):
    return value.detach().clone() if torch.is_tensor(value) else copy.deepcopy(value)


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """A copy of the optimizer's state, parameter by parameter."""
    return {p: {k: _copied(v) for k, v in state.items()} for p, state in optimizer.state.items()}


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """The optimizer's state as `saved` holds it, written into its existing tensors; a state it did not
    have yet starts from zeros (what a fresh optimizer would create)."""
    with torch.no_grad():
        for p, state in optimizer.state.items():
            before = saved.get(p, {})
            for key, value in state.items():
                if torch.is_tensor(value):
                    value.copy_(before[key]) if key in before else value.zero_()
                elif key in before:
                    state[key] = before[key]


@dataclass
class Saved:
    params: list  # (parameter, its data, its gradient or None), copies
    optimizers: list  # (optimizer, optimizer_state(optimizer))


def save(optimizers) -> Saved:
    """The state of these optimizers and of every parameter they update."""
    optimizers = list(optimizers)
    params = {id(p): p for o in optimizers for group in o.param_groups for p in group["params"]}.values()
    return Saved(params=[(p, _copied(p), None if p.grad is None else _copied(p.grad)) for p in params],
                 optimizers=[(o, optimizer_state(o)) for o in optimizers])


def restore(saved: Saved) -> None:
    """Everything save() copied, written back into the same tensors."""
    with torch.no_grad():
        for p, data, grad in saved.params:
            p.copy_(data)
            if grad is None:
                p.grad = None
            elif p.grad is None:
                p.grad = grad
            else:
                p.grad.copy_(grad)
    for optimizer, state in saved.optimizers:
        restore_optimizer(optimizer, state)


TRACE_DTYPES = {torch.float32: "float", torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half",
                torch.float64: "double"}


def parameter_elements(optimizers) -> dict[str, int]:
    """The elements of the parameters these optimizers update, by dtype as a trace names it (the
    roofline sizes the optimizer's foreach and fused ops from them: a trace gives their lists no shapes)."""
    seen, out = set(), {}
    for o in optimizers:
        for group in o.param_groups:
            for p in group["params"]:
                if id(p) not in seen:
                    seen.add(id(p))
                    name = TRACE_DTYPES.get(p.dtype, str(p.dtype))
                    out[name] = out.get(name, 0) + p.numel()
    return out


class ScalerSkips:
    """The steps a GradScaler skipped (an inf or NaN gradient while its scale calibrates), from its
    own verdict: each GradScaler.step records the inf flags it found, as device tensors (no sync),
    against the index of the loss the step will log; read once, after the run. Not from counting
    optimizer.step() calls: a fused optimizer is stepped and skips inside its kernel, and a step
    captured in a CUDA graph is replayed without any Python step at all."""

    def __init__(self, index):
        self.found = []  # (the logged loss's index, the inf flags' sum)
        real = self._real = torch.amp.GradScaler.step
        skips = self

        def step(scaler, optimizer, *args, **kwargs):
            out = real(scaler, optimizer, *args, **kwargs)
            if scaler.is_enabled():
                flags = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values()
                if flags:
                    skips.found.append((index(), sum(f.detach().float().sum() for f in flags)))
            return out

        torch.amp.GradScaler.step = step

    def steps(self) -> list[int]:
        """The indices of the logged losses whose step the scaler skipped (note: a sync, after the run)."""
        return sorted({i for i, flag in self.found if float(flag) > 0})

    def close(self) -> None:
        torch.amp.GradScaler.step = self._real
