"""How far each op is from this machine's limit, read from a profiler trace recorded with shapes.

For the ops that carry a model's time (matmuls, convolutions forward and backward, scaled-dot-product
attention, normalisation, elementwise ops and reductions, the optimizer's foreach and fused ops):
- FLOPs from the input shapes (a matmul's 2MKN, a convolution's 2 x output x its kernel's MACs, and
  twice that per gradient its backward computes, as FlopCounterMode counts them);
- bytes as the compulsory traffic: every input read and every output written once, at its dtype;
- time: on a GPU the kernels the op launched (launch and kernel share a correlation id), on a CPU
  the op's own span.
An op is counted once, at the outermost op the model covers (aten::convolution, not the cuDNN call
inside it); time outside every modelled op is "not modelled", by name, never dropped.

Against the measured ceilings (analysis.ceiling: matmul TFLOP/s per dtype, memory GB/s) each op gets
its roofline time, max(FLOPs / compute ceiling, bytes / bandwidth), the share of it reached, and its
side of the ridge; the step, "at the roofline it would take X ms; it takes Y".

The optimizer's foreach and fused ops carry no shapes in a trace (their inputs are tensor lists):
they are modelled from the parameter count the run reports (`params`), else not modelled.
"""
import ast
import math
from dataclasses import dataclass, field

from common.analysis import ceiling, traces
from common.analysis.results_run import Ceilings, OpRoof, Roofline

SIZES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4, "short int": 2,
         "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
DTYPES = {"float": "float32", "double": "float64", "c10::BFloat16": "bfloat16", "c10::Half": "float16"}
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"}
CONVS = {"aten::convolution", "aten::convolution_backward"}
ATTENTION = {"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_cudnn_attention"}
NORMS = {"aten::batch_norm": 5, "aten::layer_norm": 5, "aten::group_norm": 5, "aten::native_batch_norm_backward": 8,
         "aten::cudnn_batch_norm_backward": 8, "aten::native_layer_norm_backward": 8,
         "aten::native_group_norm_backward": 8}  # FLOPs per element, roughly: mean, variance, scale, shift
REDUCTIONS = {"aten::sum": 1, "aten::mean": 1, "aten::amax": 1, "aten::max": 1, "aten::argmax": 1, "aten::norm": 2,
              "aten::_softmax": 5, "aten::_log_softmax": 5, "aten::_log_softmax_backward_data": 3,
              "aten::_softmax_backward_data": 3, "aten::nll_loss_forward": 1, "aten::nll_loss_backward": 1,
              "aten::max_pool2d_with_indices": 9, "aten::max_pool2d_with_indices_backward": 1,
              "aten::avg_pool2d": 9, "aten::adaptive_avg_pool2d": 1, "aten::_adaptive_avg_pool2d": 1,
              "aten::binary_cross_entropy": 4, "aten::binary_cross_entropy_backward": 4}
ELEMENTWISE = {"add", "sub", "mul", "div", "relu", "clamp_min", "threshold_backward", "sigmoid", "sigmoid_backward",
               "tanh", "tanh_backward", "gelu", "gelu_backward", "silu", "silu_backward", "neg", "exp", "log", "sqrt",
               "rsqrt", "pow", "where", "fill", "zero", "copy", "_to_copy", "native_dropout",
               "native_dropout_backward", "bernoulli", "hardtanh", "leaky_relu", "addcmul", "addcdiv", "lerp",
               "masked_fill", "clamp", "abs", "reciprocal", "ge", "gt", "le", "lt", "eq", "ne"}
FUSED_OPTIMIZERS = {"aten::_fused_adam_": (4, 3, 16), "aten::_fused_adamw_": (4, 3, 17),
                    "aten::_fused_sgd_": (3, 2, 4)}  # lists read, lists written, FLOPs per element


@dataclass
class Cost:
    flops: float
    bytes: float
    dtype: str
    kind: str  # "matmul", "convolution", "attention", "normalisation", "reduction", "elementwise", "optimizer"


def _numel(dims) -> int:
    return math.prod(dims) if dims else 0


def _concrete(op, i, default=None):
    values = op["args"].get("Concrete Inputs") or []
    text = values[i] if i < len(values) else ""
    try:
        return ast.literal_eval(text) if text else default
    except (ValueError, SyntaxError):
        return default


def _inputs(op):
    args = op.get("args", {})
    return args.get("Input Dims") or [], args.get("Input type") or []


def _dtype(types, i=0) -> tuple[str, int]:
    t = types[i] if i < len(types) else "float"
    return DTYPES.get(t, t), SIZES.get(t, 4)


def _tensor_bytes(dims, types) -> float:
    return sum(_numel(d) * SIZES.get(t, 0) for d, t in zip(dims, types) if isinstance(d, list) and d)


def _conv_macs(inp, weight, stride, padding, dilation, groups) -> float:
    """Multiply-adds of a forward convolution: each output element takes C/groups x kernel of them."""
    spatial = inp[2:]
    k = weight[2:]
    n = len(spatial)
    stride, padding, dilation = (list(x) if isinstance(x, (list, tuple)) else [x] * n for x in (stride, padding,
                                                                                             dilation))
    stride, padding, dilation = ([v[0]] * n if len(v) == 1 else v for v in (stride, padding, dilation))
    out = [(spatial[i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(n)]
    return inp[0] * weight[0] * math.prod(out) * weight[1] * math.prod(k), [inp[0], weight[0], *out]


def cost(op, params: dict[str, int] | None = None) -> Cost | None:
    """The op's FLOPs and compulsory bytes from its shapes; None for an op the model does not cover."""
    name = op.get("name", "")
    dims, types = _inputs(op)
    if name in MATMULS:
        first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0  # addmm's first input is the bias
        if len(dims) < first + 2:
            return None
        a, b = dims[first], dims[first + 1]
        if len(a) < 2 or len(b) < 2:
            return None
        batch = math.prod(a[:-2]) if len(a) > 2 else 1
        m, k, n = a[-2], a[-1], b[-1]
        dtype, size = _dtype(types, first)
        out = batch * m * n
        flops = 2 * batch * m * k * n + (out if first else 0)
        return Cost(flops, _tensor_bytes(dims[:first + 2], types) + out * size, dtype, "matmul")
    if name == "aten::convolution":
        if len(dims) < 2 or len(dims[0]) < 3 or _concrete(op, 6, False):  # transposed: not modelled
            return None
        macs, out = _conv_macs(dims[0], dims[1], _concrete(op, 3, 1), _concrete(op, 4, 0), _concrete(op, 5, 1),
                               _concrete(op, 8, 1))
        dtype, size = _dtype(types)
        return Cost(2 * macs, _tensor_bytes(dims[:3], types) + _numel(out) * size, dtype, "convolution")
    if name == "aten::convolution_backward":
        if len(dims) < 3 or len(dims[1]) < 3 or _concrete(op, 7, False):
            return None
        macs, _ = _conv_macs(dims[1], dims[2], _concrete(op, 4, 1), _concrete(op, 5, 0), _concrete(op, 6, 1),
                             _concrete(op, 9, 1))
        mask = _concrete(op, 10, [True, True, False])
        dtype, size = _dtype(types)
        written = (_numel(dims[1]) if mask[0] else 0) + (_numel(dims[2]) if mask[1] else 0)
        return Cost(2 * macs * (int(bool(mask[0])) + int(bool(mask[1]))),
                    _tensor_bytes(dims[:3], types) + written * size, dtype, "convolution")
    if name in ATTENTION or name.removesuffix("_backward") in ATTENTION:
        if len(dims) < 3 or len(dims[0]) != 4:
            return None
        b, h, lq, d = dims[0]
        s = dims[1][2]
        dtype, size = _dtype(types)
        flops = 4 * b * h * lq * s * d * (2.5 if name.endswith("_backward") else 1)
        return Cost(flops, _tensor_bytes(dims[:3], types) * (2 if name.endswith("_backward") else 1)
                    + b * h * lq * d * size, dtype, "attention")
    if name in NORMS:
        if not dims or not dims[0]:
            return None
        dtype, size = _dtype(types)
        n = _numel(dims[0])
        streams = 3 if name.endswith("_backward") else 2  # x in, y out; backward: dy and x in, dx out
        return Cost(NORMS[name] * n, streams * n * size, dtype, "normalisation")
    if name in REDUCTIONS:
        if not dims or not dims[0]:
            return None
        dtype, size = _dtype(types)
        n = _numel(dims[0])
        return Cost(REDUCTIONS[name] * n, _tensor_bytes(dims, types) + (n if "backward" in name else 0) * size
                    + (n * size if "pool" in name and "backward" not in name else 0), dtype, "reduction")
    if name in FUSED_OPTIMIZERS or name.startswith("aten::_foreach_"):
        total = sum((params or {}).values())
        if not total:
            return None  # tensor lists carry no shapes: without the run's parameter count, not modelled
        size = SIZES.get(next(iter(params)), 4) if params else 4
        if name in FUSED_OPTIMIZERS:
            read, written, per = FUSED_OPTIMIZERS[name]
        else:  # each list read once, one written (in place: the first, back; else a new one)
            read, written, per = sum(1 for t in types if t == "TensorList"), 1, 1
        return Cost(per * total, (read + written) * total * size, "float32", "optimizer")
    base = name.removeprefix("aten::").rstrip("_")
    if base in ELEMENTWISE:
        tensors = [(d, t) for d, t in zip(dims, types) if isinstance(d, list) and d]
        if not tensors:
            return None
        out = max(_numel(d) for d, _ in tensors)
        dtype, size = _dtype([t for _, t in tensors])
        reads = 0 if base in ("fill", "zero") else _tensor_bytes([d for d, _ in tensors], [t for _, t in tensors])
        flops = 0 if base in ("copy", "_to_copy", "fill", "zero") else out
        return Cost(flops, reads + out * size, dtype, "elementwise")
    return None


def peak_flops(c: Cost, ceilings: Ceilings, tf32: tuple[bool, bool]) -> float | None:
    """The compute ceiling for an op, in FLOP/s: the tensor-core figure of its dtype for matmuls,
    convolutions and attention (TF32 where the stamp says it was on), the fp32 one for the rest."""
    if c.kind in ("matmul", "convolution", "attention"):
        tflops = ceiling.peak_tflops(ceilings, c.dtype, tf32[0 if c.kind == "matmul" else 1])
    else:
        tflops = ceilings.fp32_tflops
    return tflops * 1e12 if tflops else None


@dataclass
class _Row:
    name: str
    kind: str
    dtype: str
    calls: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    us: float = 0.0
    roof_us: float = 0.0
    compute_us: float = 0.0
    memory_us: float = 0.0
    spans: list = field(default_factory=list)


def read(trace_path, cuda: bool, ceilings: Ceilings | None, tf32=(False, True),
         params: dict[str, int] | None = None) -> Roofline:
    """The roofline of a trace's profiled steps, per step: each modelled op (by name and dtype)."""
    events, n = traces.profiled(trace_path)
    return of_events(events, n, cuda, ceilings, tf32, params)


def kernel_ms(events, n: int) -> dict[str, float]:
    """Each kernel's time per step, by name (GPU traces; empty on a CPU)."""
    out = {}
    for k in events:
        if k.get("cat") == "kernel":
            out[k["name"]] = out.get(k["name"], 0.0) + k.get("dur", 0) / 1000 / n
    return out


IMPLEMENTATIONS = ("cudnn_", "native_", "mkldnn_", "miopen_")  # one op by another library: one name


def canonical(name: str) -> str:
    """An op's name less the library that implements it: aten::cudnn_batch_norm_backward and
    aten::native_batch_norm_backward are both aten::batch_norm_backward (autocast moves between them)."""
    head, sep, rest = name.partition("::")
    for prefix in IMPLEMENTATIONS:
        if sep and rest.startswith(prefix):
            return f"{head}::{rest[len(prefix):]}"
    return name


def op_ms(r: Roofline) -> dict[str, float]:
    """Each op's time per step, by canonical name: the modelled ones (their dtypes together) and the others."""
    out = {}
    for name, ms in [*r.unmodelled_ms.items(), *((o.name, o.ms) for o in r.ops)]:
        out[canonical(name)] = out.get(canonical(name), 0.0) + ms
    return out


def of_events(events, n: int, cuda: bool, ceilings: Ceilings | None, tf32=(False, True),
              params: dict[str, int] | None = None) -> Roofline:
    """The roofline of profiled events (traces.profiled) over n steps."""
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    costs = {id(e): cost(e, params) for e in ops}
    stacks = traces.enclosing(events)

    def modelled_root(e):
        """The outermost modelled op around (or at) an event, else None."""
        return next((o for o in stacks.get(id(e), []) if costs.get(id(o)) is not None), None)

    rows, unmodelled = {}, {}
    for e in ops:
        c = costs[id(e)]
        if c is None or modelled_root(e) is not e:
            continue
        row = rows.setdefault((e["name"], c.dtype), _Row(e["name"], c.kind, c.dtype))
        row.calls += 1
        row.flops += c.flops
        row.bytes += c.bytes
        if ceilings is not None:
            peak = peak_flops(c, ceilings, tf32)
            row.compute_us += c.flops / peak * 1e6 if peak else 0.0
            row.memory_us += c.bytes / (ceilings.bandwidth_gbs * 1e9) * 1e6 if ceilings.bandwidth_gbs else 0.0
        if not cuda:
            row.us += e.get("dur", 0)
    busy_us = 0.0
    if cuda:  # each kernel's time to the op that launched it (the outermost modelled one, else its own)
        kernels = {}
        for k in events:
            if k.get("cat") in traces.GPU_CATS:
                kernels.setdefault(k.get("args", {}).get("correlation"), []).append(k)
        spans = []  # the kernels launched inside the profiled steps (the trace holds a few from before)
        for launch in (e for e in events if e.get("cat") in traces.LAUNCH_CATS):
            started = kernels.get(launch.get("args", {}).get("correlation"), [])
            if not started:
                continue
            spans += [(k["ts"], k["ts"] + k.get("dur", 0)) for k in started]
            us = sum(k.get("dur", 0) for k in started)
            root = modelled_root(launch)
            if root is not None:
                c = costs[id(root)]
                rows[(root["name"], c.dtype)].us += us
            else:
                stack = stacks.get(id(launch), [])
                key = stack[-1]["name"] if stack else launch.get("name", "?")
                unmodelled[key] = unmodelled.get(key, 0.0) + us
        busy_us = traces.union_length(spans)
    else:  # a CPU's busy time: the top-level ops' spans; what no modelled op covers is not modelled
        covered = {}  # a top-level op -> the time of the modelled ops inside it
        for e in ops:
            stack = stacks.get(id(e), [])
            if stack and modelled_root(e) is e:
                covered[id(stack[0])] = covered.get(id(stack[0]), 0.0) + e.get("dur", 0)
        for e in ops:
            if len(stacks.get(id(e), [])) == 1:  # a top-level op
                busy_us += e.get("dur", 0)
                left = e.get("dur", 0) - covered.get(id(e), 0.0)
                if left > 0:
                    unmodelled[e["name"]] = unmodelled.get(e["name"], 0.0) + left
    out = []
    for row in rows.values():
        roof = max(row.compute_us, row.memory_us) if ceilings is not None else None
        out.append(OpRoof(name=row.name, kind=row.kind, dtype=row.dtype, calls=row.calls / n,
                          flops=row.flops / n, bytes=row.bytes / n, ms=row.us / 1000 / n,
                          roof_ms=roof / 1000 / n if roof else None,
                          bound=None if roof is None else "compute" if row.compute_us >= row.memory_us else "memory"))
    out.sort(key=lambda r: r.ms, reverse=True)
    modelled_ms = sum(r.ms for r in out)
    return Roofline(ops=out, busy_ms=busy_us / 1000 / n, modelled_ms=modelled_ms,
                    roof_ms=sum(r.roof_ms for r in out if r.roof_ms) if ceilings is not None else None,
                    unmodelled_ms={k: v / 1000 / n for k, v in sorted(unmodelled.items(), key=lambda kv: -kv[1])
                                   if v > 0}, steps=n, device="cuda" if cuda else "cpu",
                    ceilings=ceilings)


