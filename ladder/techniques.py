"""One small function per technique: a ladder script switches each on at its rung (ladder.switches)."""
import contextlib

import torch

from common.measure import device as device_profile
from common.measure import stages, tf32


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


def adam(params, device: torch.device, fused: bool, lr: float, kind=torch.optim.Adam) -> torch.optim.Optimizer:
    """Adam (or AdamW: `kind`) as its rung has it."""
    if fused:  # one kernel for every parameter on CUDA; foreach (a few multi-tensor ops) on CPU
        cuda = device.type == "cuda"
        return kind(params, lr=lr, fused=cuda, foreach=not cuda)
    return kind(params, lr=lr)  # the default: foreach on CUDA, one op per tensor on CPU


def adamw(params, device: torch.device, fused: bool, lr: float) -> torch.optim.Optimizer:
    return adam(params, device, fused, lr, kind=torch.optim.AdamW)


def attention_by_hand(q, k, v):
    """nanoGPT's attention without flash: scores, the causal mask, a softmax, the weighted sum."""
    T = q.size(-2)
    scores = q @ k.transpose(-2, -1) * q.size(-1) ** -0.5
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v


def apply_tf32(on: bool) -> None:
    """fp32 matmuls on TF32 tensor cores (sm_80+): fp32's range, a 10-bit mantissa. Set through both of torch's
    APIs (common.measure.tf32): with the new one alone, Inductor's reads of the old one would raise."""
    tf32.set_tf32(on)


def graphs_compiled() -> int:
    """The graphs Dynamo has captured in this process (0 before any compiled call has run)."""
    compiled = stages.compile_stats()
    return compiled.graphs if compiled else 0


def compile_blocks(blocks) -> None:
    """Regional compilation: each transformer block compiled in place; they share their code, so one graph
    serves them all."""
    for block in blocks:
        block.compile(fullgraph=True)


def apply_compile(model: torch.nn.Module, mode: str | None = None):
    """fullgraph: a graph break is an error, not a silent slowdown."""
    return torch.compile(model, mode=mode, fullgraph=True)


def apply_cudnn_benchmark(on: bool) -> None:
    torch.backends.cudnn.benchmark = on  # time each convolution's algorithms once per shape, keep the fastest


def inference_context(on: bool):
    return torch.inference_mode() if on else torch.no_grad()
