"""fp16's dynamic loss scaling put into a user's script from outside (the doctor's `--try amp` on a GPU
without bf16, a T4), as Accelerate wraps a user's optimizer: torch's own GradScaler, its calls placed
where the script's backward and optimizer step already run.

- each backward's loss (or the gradients it was given) is scaled;
- before each optimizer step (after its closure, for a step that takes one), and before a
  clip_grad_norm_ or clip_grad_value_ of the script's, the gradients of the optimizers that hold the
  parameters are unscaled, once per step, and checked for inf or NaN;
- a step whose gradients overflowed updates nothing: its gradients are dropped, so every torch.optim
  optimizer skips every parameter, as GradScaler.step skips the step;
- the scale is updated once per iteration, at the next backward, so that every optimizer of one
  iteration is unscaled by the same scale.

Where that cannot be right, the scale refuses, says why, and scales nothing from then on: the script
scales its own loss (its own enabled GradScaler), its parameters are fp16 (`model.half()`), or a step's
closure runs twice (LBFGS)."""
import torch
from torch.amp.grad_scaler import OptState

from common.analysis.results_doctor import LossScaling
from common.measure import faults

CLIPS = ("clip_grad_norm_", "clip_grad_value_")  # what a script clips with, in torch.nn.utils and its clip_grad


class LossScale:
    def __init__(self, device_type: str):
        self.scaler = torch.amp.GradScaler(device_type)
        self.first = self.scaler.get_scale()  # its initial scale, a float until the first backward
        self.pending = False  # a step ran since the last update
        self.backwards = self.steps = self.skipped = 0
        self.closures = {}  # optimizer id -> closure calls in its step under way
        self.refused = None  # why it stopped scaling, once it has
        self.overflow_at = faults.overflow_at()  # a test's planted overflow: that backward's gradients are inf

    def refuse(self, why: str) -> None:
        self.refused = self.refused or why

    def scale(self, tensors):
        """A backward's loss, or the gradients it was given, scaled (as they were, once refused)."""
        if self.refused:
            return tensors
        if self.pending:
            self._update()
        self.backwards += 1
        scaled = self.scaler.scale(tensors)
        if self.backwards == self.overflow_at:
            return scaled * float("inf") if isinstance(scaled, torch.Tensor) else [t * float("inf") for t in scaled]
        return scaled

    def _update(self) -> None:
        states = self.scaler._per_optimizer_states
        if any(state["found_inf_per_device"] for state in states.values()):
            self.scaler.update()  # backs off after an overflow, grows after enough clean steps
        else:  # the iteration's optimizers held no gradient: nothing was checked, nothing to update
            states.clear()
        self.pending = False

    def unscale(self, optimizer) -> None:
        """The optimizer's gradients divided by the scale and checked, once per step."""
        if self.refused or self.scaler._scale is None:
            return
        if self.scaler._per_optimizer_states[id(optimizer)]["stage"] is OptState.UNSCALED:
            return
        try:
            self.scaler.unscale_(optimizer)
        except ValueError as e:  # fp16 parameters: GradScaler refuses their gradients
            self.refuse(f"{e} (the model's parameters are fp16)")

    def check(self, optimizer) -> None:
        """Before the step's update: an overflowed step's gradients dropped."""
        if self.refused or self.scaler._scale is None:
            return
        self.unscale(optimizer)
        found = self.scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        if found and sum(v.item() for v in found.values()):  # note: a sync, as GradScaler.step's own
            drop(optimizer)
            self.skipped += 1

    def before_step(self, optimizer, closure: bool) -> None:
        if closure:  # its backward runs inside the step: checked when the closure returns
            self.closures[id(optimizer)] = 0
        else:
            self.check(optimizer)

    def after_closure(self, optimizer) -> None:
        calls = self.closures[id(optimizer)] = self.closures.get(id(optimizer), 0) + 1
        if calls > 1:  # LBFGS: a second backward after the gradients were unscaled
            drop(optimizer)
            self.refuse("a step's closure ran twice (LBFGS): its gradients cannot be unscaled from outside")
            return
        self.check(optimizer)

    def after_step(self, optimizer) -> None:
        self.closures.pop(id(optimizer), None)
        if self.scaler._scale is not None and \
                self.scaler._per_optimizer_states[id(optimizer)]["stage"] is OptState.UNSCALED:
            self.steps += 1
            self.pending = True

    def record(self) -> LossScaling:
        return LossScaling(first=self.first, last=self.scaler.get_scale(), steps=self.steps, skipped=self.skipped,
                           refused=self.refused)


def drop(optimizer) -> None:
    """The step updates nothing: torch.optim's optimizers skip a parameter whose gradient is None."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None


def holding(optimizers, parameters) -> list:
    """The optimizers that hold any of these parameters."""
    ids = {id(p) for p in parameters}
    return [o for o in optimizers if any(id(p) in ids for g in o.param_groups for p in g["params"])]


def wrap_clips(fixes) -> list:
    """The script's gradient clips (torch.nn.utils's and torch.nn.utils.clip_grad's) see true gradients:
    the optimizers holding the clipped parameters are unscaled first. (owner, name, real) to restore."""
    import torch.nn.utils.clip_grad as clip_grad

    patched = []
    for owner in (torch.nn.utils, clip_grad):
        for name in CLIPS:
            real = getattr(owner, name)

            def clip(parameters, *a, _real=real, **k):
                parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
                if fixes.loss_scale is not None:
                    for optimizer in holding(fixes.optimizers, parameters):
                        fixes.loss_scale.unscale(optimizer)
                return _real(parameters, *a, **k)

            setattr(owner, name, clip)
            patched.append((owner, name, real))
    return patched


def wrap_script_scaler(fixes) -> list:
    """A script that scales its own loss (an enabled GradScaler of its own) gets no second scale."""
    real = torch.amp.GradScaler.scale

    def scale(scaler, outputs):
        if fixes.loss_scale is not None and scaler is not fixes.loss_scale.scaler and scaler.is_enabled():
            fixes.loss_scale.refuse("the script scales its own loss (a GradScaler of its own)")
        return real(scaler, outputs)

    torch.amp.GradScaler.scale = scale
    return [(torch.amp.GradScaler, "scale", real)]
