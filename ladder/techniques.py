"""One small function per technique: a ladder script switches each on at its rung (ladder.switches)."""
import contextlib

import torch

from common.measure import device as device_profile


def apply_channels_last(model: torch.nn.Module) -> torch.nn.Module:
    return model.to(memory_format=torch.channels_last)  # NHWC: what tensor-core convolutions want


def channels_last_input(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last)


def amp_dtype(run) -> torch.dtype:
    """bf16 where the device has it natively (sm_80+, a CPU), else fp16: the run's device profile."""
    return device_profile.amp_dtype(run.profile)


def autocast(run, enabled: bool):
    return torch.autocast(run.device.type, dtype=amp_dtype(run)) if enabled else contextlib.nullcontext()


def grad_scaler(run, enabled: bool) -> torch.amp.GradScaler:
    """fp16 needs loss scaling (small gradients flush to zero); bf16 keeps fp32's range and does not."""
    return torch.amp.GradScaler(run.device.type, enabled=enabled and run.profile.grad_scaler)


def adam(params, device: torch.device, fused: bool, lr: float) -> torch.optim.Optimizer:
    if fused:  # one kernel for every parameter on CUDA; foreach (a few multi-tensor ops) on CPU
        cuda = device.type == "cuda"
        return torch.optim.Adam(params, lr=lr, fused=cuda, foreach=not cuda)
    return torch.optim.Adam(params, lr=lr)  # the default: foreach on CUDA, one op per tensor on CPU


def apply_compile(model: torch.nn.Module, mode: str | None = None):
    """fullgraph: a graph break is an error, not a silent slowdown."""
    return torch.compile(model, mode=mode, fullgraph=True)


def apply_cudnn_benchmark(on: bool) -> None:
    torch.backends.cudnn.benchmark = on  # time each convolution's algorithms once per shape, keep the fastest


def inference_context(on: bool):
    return torch.inference_mode() if on else torch.no_grad()
