"""Dropout's randomness across a pair's twins. CUDA's fused dropout kernel draws its Philox numbers per
vector of 16 bytes (aten/src/ATen/native/cuda/Dropout.cu, get_vector_size): 4 fp32 elements, 8 bf16
ones, so under one seed an fp32 twin and a 16-bit twin drop other units; a CPU's draws fp32's mask
whatever the dtype. `SharedMasks`: the harness's remedy over the checked stages; `DtypeMasks`: CUDA's
behaviour on a CPU, for the tests and the simulated GPU profiles; `python -m recipes.amp.dropout_check`
measures both on a device."""
import sys

import torch
import torch.nn.functional as F


class _Replaced:
    """F.dropout (nn.Dropout's, looked up at each call) replaced by `drop` while entered, and put back as
    it was found on exit, so that two of them nest either way; a call made from inside `drop` (a
    torch-function mode handing F.dropout back) goes to the function it replaced. Nothing else is
    touched: no mode over every op, so the steps run under it cost what they cost without it."""

    def __init__(self):
        self._native, self._inside = None, False

    def drop(self, native, input, p, inplace):
        """The output, or None for the replaced function's."""
        raise NotImplementedError

    def __enter__(self):
        self._native = native = F.dropout

        def dropout(input, p=0.5, training=True, inplace=False):
            if self._inside or not (training and 0 < p < 1 and input.is_floating_point()):
                return native(input, p, training, inplace)
            self._inside = True
            try:
                out = self.drop(native, input, p, inplace)
            finally:
                self._inside = False
            return native(input, p, training, inplace) if out is None else out

        F.dropout = dropout
        return self

    def __exit__(self, *exc):
        F.dropout = self._native
        return False


class SharedMasks(_Replaced):
    """While entered, F.dropout (nn.Dropout's) draws the mask an fp32 input of its shape would get,
    whatever the input's dtype: native dropout on fp32 ones in the input's layout, from the same
    generator at the same offset (on CUDA the offset depends on the element count alone; the mask is
    the fp32 one wherever the input is dense and 16-byte aligned, as a layer's fresh output is),
    the input scaled in fp32 and rounded once, so that an fp32 twin draws exactly what it draws without
    it and a bf16 or fp16 twin draws the same units. The harness runs the checked, untimed stages under
    it (warm-up and learning probe: harness.Run.loop), whose warm-up steps size the timed stretch: they
    cost what they cost without it (_Replaced). `calls` and `dtypes`: the dropouts it saw in training and
    their inputs' dtypes, for parity to know whether the twins' own dropout draws the same stream after
    it (aggregate.parity)."""

    def __init__(self):
        super().__init__()
        self.calls, self.dtypes = 0, set()

    def drop(self, native, input, p, inplace):
        self.calls += 1
        self.dtypes.add(str(input.dtype).removeprefix("torch."))
        # ones in the input's layout (a channels_last input is drawn in memory order), by the same path
        # (inplace: bernoulli_; else CUDA's fused kernel), so that fp32 draws what it would
        keep = native(torch.ones_like(input, dtype=torch.float32), p, True, inplace) != 0
        # x/(1-p) in fp32, rounded once, as the fused kernel does; backward keeps the bool mask, as it does
        out = (input.float() * (1.0 / (1.0 - p)) * keep).to(input.dtype)
        return input.copy_(out) if inplace else out


def compiled(script) -> bool:
    """Whether the script (its module) holds a torch.compile'd model or function, or Dynamo has already
    traced something: then no mode may wrap its first steps (Dynamo guards on the mode stack)."""
    if "torch._dynamo" not in sys.modules:  # torch.compile imports it (so does torch.optim, alone)
        return False
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.utils import counters

    if counters["stats"].get("unique_graphs", 0):
        return True
    return any(isinstance(v, OptimizedModule) or hasattr(v, "_torchdynamo_orig_callable")
               for v in vars(script).values()) if script is not None else False


class DtypeMasks(_Replaced):
    """A stand-in for CUDA's dropout on a CPU, entered by the harness under a simulated GPU profile: the
    mask depends on the input's dtype, as CUDA's fused kernel's does (it maps its Philox numbers to
    elements per vector of 16 bytes: 4 fp32 elements, 8 bf16 ones), so that under one seed an fp32 twin
    and a 16-bit twin drop other units. A CPU's own dropout draws fp32's mask whatever the dtype."""

    def drop(self, native, input, p, inplace):
        if input.dtype not in (torch.bfloat16, torch.float16):
            return None
        drawn = torch.rand(input.numel() + 8, device=input.device)[8:]  # another offset and order than fp32's
        keep = (drawn.flip(0).view(input.shape) >= p).to(input.dtype)
        out = input * keep / (1 - p)
        return input.copy_(out) if inplace else out
