"""A user script's settings, read from what it runs rather than from its code: the DataLoader it
built, the batch it feeds, and from the profiled steps' trace (recorded with shapes) the dtype of
its matmuls and convolutions, the memory layout of its convolutions' inputs, whether its optimizer
runs per-parameter for-loops, foreach or fused kernels, and whether zero_grad writes zeros."""
import dataclasses
from collections.abc import Mapping
from pathlib import Path

import torch

from common.analysis import attention
from common.analysis.results_doctor import LoaderSettings, OpsSeen
from common.measure.profiling import read_trace

CLOSURE = "doctor: optimizer closure"  # common.measure.observer's range around a step's closure

# the ops each matmul or convolution goes through once autocast has cast its inputs
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
CONV_OPS = ("aten::convolution",)
DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16", "double": "float64"}


def batch_size_of(batch) -> int | None:
    """The first dimension of the first tensor in a batch: a tensor, a tuple or list, a Mapping (a
    dict, Hugging Face's BatchEncoding) or a dataclass of them."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        batch = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    for item in items:
        found = batch_size_of(item)
        if found:
            return found
    return None


def loader_settings(loader, batch, iterator=None) -> LoaderSettings:
    """As built; the batch size as drawn where a batch sampler sets it (the loader's own is None then);
    whether the iterator handing out its batches is the multi-process one; its batches per epoch where
    its dataset has a length."""
    try:
        per_epoch = len(loader)
    except TypeError:  # an iterable dataset without a length
        per_epoch = None
    workers = getattr(loader, "num_workers", 0) or 0  # a loader that is no torch DataLoader (fastai's) may lack some
    return LoaderSettings(batch_size=getattr(loader, "batch_size", None) or batch_size_of(batch), num_workers=workers,
                          batches_per_epoch=per_epoch, pin_memory=bool(getattr(loader, "pin_memory", False)),
                          persistent_workers=bool(getattr(loader, "persistent_workers", False)),
                          prefetch_factor=getattr(loader, "prefetch_factor", None) if workers else None,
                          processes=None if iterator is None else "MultiProcessing" in type(iterator).__name__)


def _layout(strides, dims) -> str | None:
    """NCHW or channels_last for a 4-D input; None for other ranks."""
    if len(dims) != 4 or len(strides) != 4:
        return None
    channels_last = strides[1] == 1 and dims[1] > 1
    return "channels_last" if channels_last else "NCHW"


def _inside(e, ranges) -> bool:
    return any(r["ts"] <= e["ts"] <= r["ts"] + r.get("dur", 0) for r in ranges)


def read(trace_path: Path) -> OpsSeen:
    """Per profiled step, from a trace recorded with record_shapes=True."""
    events = [e for e in read_trace(trace_path)["traceEvents"] if e.get("ph") == "X"]
    n = max(1, sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")))
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    seen = OpsSeen()

    def add(table, key):
        table[key] = table.get(key, 0.0) + 1.0 / n

    for e in ops:
        args = e.get("args", {})
        types = args.get("Input type") or []
        dtype = DTYPES.get(types[0], str(types[0])) if types else "?"
        if e["name"] in MATMUL_OPS:
            first = 1 if e["name"] in ("aten::addmm", "aten::baddbmm") else 0  # addmm's first input is the bias
            add(seen.matmul_dtypes, DTYPES.get(types[first], types[first]) if len(types) > first else "?")
        elif e["name"] in CONV_OPS:
            add(seen.conv_dtypes, dtype)
            layout = _layout((args.get("Input Strides") or [[]])[0], (args.get("Input Dims") or [[]])[0])
            if layout:
                add(seen.conv_layouts, layout)
    seen.hand_attention, seen.hand_attention_t = _hand_attention(ops, n)
    annotations = [e for e in events if e.get("cat") == "user_annotation"]
    steps = [r for r in annotations if str(r.get("name", "")).startswith("Optimizer.step#")]
    closures = [r for r in annotations if r.get("name") == CLOSURE]  # the forward and backward a step ran
    if steps:
        inside = {e["name"] for e in ops if _inside(e, steps) and not _inside(e, closures)}
        seen.optimizer = ("fused" if any("_fused_" in name for name in inside)
                          else "foreach" if any("_foreach_" in name for name in inside) else "for-loop")
    zeroing = [r for r in annotations if str(r.get("name", "")).startswith("Optimizer.zero_grad#")]
    if zeroing:
        writes = any(("zero_" in e["name"] or "fill_" in e["name"]) for e in ops if _inside(e, zeroing))
        seen.zero_grad = "zeroes" if writes else "set_to_none"
    return seen


def _hand_attention(ops, n: int) -> tuple[float | None, int | None]:
    """(softmaxes per step over T x T scores between batched matmuls, the largest T), or (None, None)."""
    count, side = attention.by_hand(ops)
    return (count / n, side) if count else (None, None)
