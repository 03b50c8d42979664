"""The doctor's fixes applied inside its child, from outside the user's script (analysis.fixes says
what each is): flags set before the script starts, PyTorch's own constructors and hooks wrapped so
that the script's DataLoader, optimizer and model calls come out changed. Each fix says in `said`
whether it was applied, or why not (the script overrode it, nothing it acts on was built)."""
import inspect
import os

import torch
from torch.utils.data import DataLoader

from common.analysis import fixes as catalog
from common.measure import device as device_profile
from common.measure import tf32
from common.measure.loss_scale import LossScale, wrap_clips, wrap_script_scaler


def loader_workers() -> int:
    """All usable cores but one, as the dataloader recipe sizes them, and at least 2: one worker only
    overlaps loading with the step, while a loader-bound step needs loading itself to go faster."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(16, cores - 1))


def _cast_float(output):
    """A model's 16-bit outputs back in float32, so that the script's loss runs as it did (BCELoss
    refuses 16-bit under autocast; the amp recipe casts the same way)."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.is_floating_point() and output.dtype != torch.float64 else output
    if isinstance(output, (tuple, list)) and type(output) in (tuple, list):
        return type(output)(_cast_float(o) for o in output)
    if isinstance(output, dict):
        return {k: _cast_float(v) for k, v in output.items()}
    return output


def _channels_last(x):
    if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
        return x.contiguous(memory_format=torch.channels_last)
    return x


class Fixes:
    """The fixes asked for, installed before the script runs and removed after it."""

    def __init__(self, names: list[str]):
        unknown = set(names) - set(catalog.known(test_fixes=True))
        if unknown:
            raise ValueError(f"unknown fixes {sorted(unknown)}")
        self.names = set(names)
        self.said = {name: "not applied: nothing it acts on was built or called" for name in names}
        self._patched = []
        self._models = set()  # ids of the top-level models already changed (channels_last, compile)
        self._autocast = None
        self._stepped = set()  # ids of the optimizers already changed (fused, zero_lr)
        self.optimizers = []  # every torch.optim optimizer the script built (a clip unscales their gradients)
        self.loss_scale = None  # LossScale, once the amp fix autocasts to fp16
        self._amp = None  # (device type, dtype) of the amp fix's autocast, from the first model call
        self.force_set_to_none = "set_to_none" in self.names

    def on(self, name: str) -> bool:
        return name in self.names

    def install(self) -> None:
        if self.on("tf32"):
            tf32.set_tf32(True)  # fp32_precision, the legacy flags mirrored: the script may read either
            self.said["tf32"] = "applied"
        if self.on("cudnn_benchmark"):
            torch.backends.cudnn.benchmark = True
            self.said["cudnn_benchmark"] = "applied"
        if self.on("workers"):
            self._wrap_loader()
        if self.on("amp"):  # where it runs in fp16: the script's clips see true gradients, its own scaler wins
            self._patched += wrap_clips(self) + wrap_script_scaler(self)

    def uninstall(self) -> None:
        for owner, name, real in self._patched:
            setattr(owner, name, real)
        self._patched = []

    def _wrap_loader(self) -> None:
        real = DataLoader.__init__
        signature = inspect.signature(real)
        fixes = self

        def init(loader, *args, **kwargs):
            bound = signature.bind(loader, *args, **kwargs)
            given = bound.arguments.get("num_workers", 0)
            if given:
                if fixes.said["workers"] != "applied":
                    fixes.said["workers"] = f"not applied: the script builds its DataLoader with {given} workers itself"
                return real(loader, *args, **kwargs)
            bound.arguments.update(num_workers=loader_workers(), pin_memory=torch.cuda.is_available(),
                                   persistent_workers=True, prefetch_factor=4)
            fixes.said["workers"] = "applied"
            return real(*bound.args, **bound.kwargs)

        DataLoader.__init__ = init
        self._patched.append((DataLoader, "__init__", real))

    # --- called by the observer's hooks ---------------------------------------------------------------
    def built(self, optimizer) -> None:
        self.optimizers.append(optimizer)

    def before_backward(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """torch.autograd.backward's arguments, the loss scaled where fp16's loss scaling is on."""
        if self.loss_scale is None:
            return args, kwargs
        if len(args) > 1 and args[1] is not None:  # given gradients: scaled instead of the loss, the same thing
            return (args[0], self.loss_scale.scale(args[1]), *args[2:]), kwargs
        if kwargs.get("grad_tensors") is not None:
            return args, {**kwargs, "grad_tensors": self.loss_scale.scale(kwargs["grad_tensors"])}
        if args:
            return (self.loss_scale.scale(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "tensors": self.loss_scale.scale(kwargs["tensors"])}

    def after_closure(self, optimizer) -> None:
        if self.loss_scale is not None:
            self.loss_scale.after_closure(optimizer)

    def after_step(self, optimizer) -> None:
        if self.loss_scale is not None:
            self.loss_scale.after_step(optimizer)

    def before_model(self, module: torch.nn.Module, inputs):
        """A top-level model's call is about to run: new inputs, or None to keep them."""
        if not any(True for _ in module.parameters()):
            return None  # a loss module or a parameter-free wrapper: not the model
        first = id(module) not in self._models
        self._models.add(id(module))
        if self.on("compile") and first:  # takes effect from the next call: this one is under way
            module.forward = torch.compile(module.forward)
            self.said["compile"] = "applied"
        if self.on("channels_last"):
            if first:
                module.to(memory_format=torch.channels_last)
            self.said["channels_last"] = "applied"
            inputs = tuple(_channels_last(x) for x in inputs)
        if self.on("amp") and self._amp_ready(module):
            self._autocast = torch.autocast(*self._amp)
            self._autocast.__enter__()
        return inputs if self.on("channels_last") else None

    def _amp_ready(self, module) -> bool:
        """Whether the amp fix autocasts this call: bf16 where the device has it; fp16 (a T4) only with a loss
        scale, which needs a torch.optim optimizer to check the gradients before (fastai's and Keras's own
        optimizers cannot be)."""
        if self._amp is None:
            device = next(module.parameters()).device
            profile = device_profile.profile(device)
            self._amp = (device.type, device_profile.amp_dtype(profile))
            if profile.grad_scaler:  # fp16: its narrow range needs a loss scale
                if not self.optimizers:
                    self.said["amp"] = ("not applied: fp16 (this GPU has no bf16) needs a loss scale checked before "
                                        "each optimizer step, and the script built no torch.optim optimizer")
                    self._amp = ()
                    return False
                self.loss_scale = LossScale(device.type)
            self.said["amp"] = "applied"
        return bool(self._amp)

    def after_model(self, module: torch.nn.Module, output):
        """A top-level model's call returned: a new output, or None to keep it."""
        if self._autocast is None:
            return None
        self._autocast.__exit__(None, None, None)
        self._autocast = None
        return _cast_float(output)

    def before_step(self, optimizer: torch.optim.Optimizer, closure: bool = False) -> None:
        """An optimizer is about to step (closure: its backward runs inside the step): the loss scale's
        check; the first time, its groups change (fused or foreach, or the test's zeroed learning rate),
        before any state exists."""
        if self.loss_scale is not None:
            self.loss_scale.before_step(optimizer, closure)
        if id(optimizer) in self._stepped:
            return
        self._stepped.add(id(optimizer))
        if self.on("fused"):
            self._fuse(optimizer)
        if self.on("zero_lr"):
            for group in optimizer.param_groups:
                group["lr"] = 0.0
            self.said["zero_lr"] = "applied"

    def _fuse(self, optimizer: torch.optim.Optimizer) -> None:
        accepts = inspect.signature(type(optimizer).__init__).parameters
        if "foreach" not in accepts:
            if self.said["fused"] != "applied":
                self.said["fused"] = f"not applied: {type(optimizer).__name__} has no foreach or fused form"
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        fused = "fused" in accepts and params and all(p.is_cuda and p.is_floating_point() for p in params)
        for group in optimizer.param_groups:
            group.update(fused=True, foreach=False) if fused else group.update(foreach=True)
        optimizer.defaults.update(fused=True, foreach=False) if fused else optimizer.defaults.update(foreach=True)
        if fused:
            optimizer._step_supports_amp_scaling = True  # as the constructor sets it for fused=True
        self.said["fused"] = "applied"

    def zero_grad_arg(self, set_to_none: bool) -> bool:
        """The set_to_none a zero_grad call gets: True where the fix overrides the script's False."""
        if self.force_set_to_none and not set_to_none:
            self.said["set_to_none"] = "applied"
            return True
        return set_to_none
