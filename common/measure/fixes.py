"""The doctor's fixes applied inside its child, from outside the user's script (analysis.fixes says
what each is): flags set before the script starts, PyTorch's own constructors and hooks wrapped so
that the script's DataLoader, optimizer and model calls come out changed. Each fix says in `said`
whether it was applied, or why not (the script overrode it, nothing it acts on was built)."""
import inspect
import os

import torch
from torch.utils.data import DataLoader

from common.analysis import fixes as catalog
from common.analysis.results import LossScaling
from common.measure import device as device_profile
from common.measure import faults, tf32


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


class LossScale:
    """fp16's dynamic loss scaling from outside the script, as Accelerate wraps a user's optimizer: torch's
    own GradScaler, its calls put where the script's backward and optimizer step already run. The loss is
    scaled at each backward; before each step (or before a clip_grad_norm_ the script calls, which must
    see true gradients) the gradients are unscaled and checked; a step whose gradients overflowed updates
    nothing (its gradients dropped, so the optimizer skips every parameter, as GradScaler.step skips the
    step); the scale is updated after it."""

    def __init__(self, device_type: str):
        self.scaler = torch.amp.GradScaler(device_type)
        self.first = self.scaler.get_scale()  # its initial scale, a float until the first backward
        self.unscaled = set()  # ids of the optimizers whose gradients are unscaled since the last update
        self.backwards = self.steps = self.skipped = 0
        self.overflow_at = faults.overflow_at()

    def scale(self, loss):
        self.backwards += 1
        scaled = self.scaler.scale(loss)
        return scaled * float("inf") if self.backwards == self.overflow_at else scaled

    def unscale(self, optimizer) -> None:
        if self.scaler._scale is not None and id(optimizer) not in self.unscaled:
            self.scaler.unscale_(optimizer)
            self.unscaled.add(id(optimizer))

    def before_step(self, optimizer) -> None:
        if self.scaler._scale is None:  # no backward scaled yet (one inside the step's closure): nothing to check
            return
        self.unscale(optimizer)
        found = self.scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        if sum(v.item() for v in found.values()):  # note: a sync, as GradScaler.step's own
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped += 1

    def after_step(self, optimizer) -> None:
        if id(optimizer) in self.unscaled:
            self.steps += 1
            self.scaler.update()
            self.unscaled.clear()

    def record(self) -> LossScaling:
        return LossScaling(first=self.first, last=self.scaler.get_scale(), steps=self.steps, skipped=self.skipped)


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
        if self.on("amp"):
            self._wrap_clips()

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

    def _wrap_clips(self) -> None:
        """A gradient clip sees the gradients unscaled, as GradScaler's recipe has the script call unscale_ first."""
        fixes = self
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            real = getattr(torch.nn.utils, name)

            def clip(*a, _real=real, **k):
                if fixes.loss_scale is not None:
                    for optimizer in fixes.optimizers:
                        fixes.loss_scale.unscale(optimizer)
                return _real(*a, **k)

            setattr(torch.nn.utils, name, clip)
            self._patched.append((torch.nn.utils, name, real))

    # --- called by the observer's hooks ---------------------------------------------------------------
    def built(self, optimizer) -> None:
        self.optimizers.append(optimizer)

    def before_backward(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """torch.autograd.backward's arguments, the loss scaled where fp16's loss scaling is on."""
        if self.loss_scale is None:
            return args, kwargs
        given = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
        if given is not None:  # a backward of given gradients: not a loss's; left as the script wrote it
            return args, kwargs
        if args:
            return (self.loss_scale.scale(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "tensors": self.loss_scale.scale(kwargs["tensors"])}

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
        if self.on("amp"):
            device = next(module.parameters()).device
            profile = device_profile.profile(device)
            if profile.grad_scaler and self.loss_scale is None:  # fp16 (a T4): its narrow range needs a loss scale
                self.loss_scale = LossScale(device.type)
            self._autocast = torch.autocast(device.type, dtype=device_profile.amp_dtype(profile))
            self._autocast.__enter__()
            self.said["amp"] = "applied"
        return inputs if self.on("channels_last") else None

    def after_model(self, module: torch.nn.Module, output):
        """A top-level model's call returned: a new output, or None to keep it."""
        if self._autocast is None:
            return None
        self._autocast.__exit__(None, None, None)
        self._autocast = None
        return _cast_float(output)

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer is about to step: the first time, its groups change (fused or foreach, or the
        test's zeroed learning rate), before any state exists."""
        if self.loss_scale is not None:
            self.loss_scale.before_step(optimizer)
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
