"""TF32, read and set with torch's current API (`fp32_precision`, torch 2.9+), safe whichever API
the user's script used.

Since torch 2.9, reading a legacy flag (`torch.backends.cuda.matmul.allow_tf32`,
`torch.get_float32_matmul_precision()`) raises RuntimeError once the process has set an
`fp32_precision` that the legacy state does not mirror; the `fp32_precision` reads never raise. So
the cookbook reads only those, resolved as cuBLAS and cuDNN resolve them (ATen's
Context::float32Precision: the op's own setting, else its backend's "all", else the generic one),
and when it sets TF32 it sets the legacy flags to the same state afterwards, so that a script that
reads either API afterwards reads the same answer and nothing raises."""
import torch

NONE = "none"  # "inherit from the level above"


def _resolved(*levels) -> str:
    for level in levels:
        value = level.fp32_precision
        if value != NONE:
            return value
    return NONE


def matmul_precision() -> str:
    """cuBLAS matmuls' fp32 precision: "tf32" or "ieee" (or "none": the default, ieee)."""
    return _resolved(torch.backends.cuda.matmul, torch.backends.cudnn, torch.backends)


def conv_precision() -> str:
    """cuDNN convolutions' fp32 precision: "tf32" (cuDNN's default) or "ieee"."""
    return _resolved(torch.backends.cudnn.conv, torch.backends.cudnn, torch.backends)


def state() -> tuple[bool, bool]:
    """(TF32 for matmuls, TF32 for convolutions), read without the legacy flags."""
    return matmul_precision() == "tf32", conv_precision() == "tf32"


def float32_matmul_precision() -> str:
    """What torch.get_float32_matmul_precision() says, or, where reading it would raise (the script
    set fp32_precision), its equivalent: "high" for TF32 matmuls, else "highest"."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return "high" if state()[0] else "highest"


def set_tf32(on: bool) -> None:
    """TF32 on (or strict fp32) for cuBLAS matmuls and cuDNN convolutions."""
    # the legacy mirror first, in the same state: a script reading allow_tf32 or
    # get_float32_matmul_precision afterwards reads it, where the new API alone would make it raise
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    value = "tf32" if on else "ieee"
    torch.backends.cuda.matmul.fp32_precision = value
    torch.backends.cudnn.conv.fp32_precision = value
