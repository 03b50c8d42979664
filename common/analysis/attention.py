"""Which attention a profiled step ran, read from its trace: the backend scaled_dot_product_attention
dispatched to (by the op it called and, on a GPU, the kernels under it), FlexAttention (the kernels
Inductor generated for it, or its eager reference), or attention written by hand (a softmax between
batched matmuls, its T x T scores a tensor of their own). None where the step has no attention at all."""

# the op scaled_dot_product_attention dispatches to, per backend (torch/nn/functional.py's docs name them)
BACKENDS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "the CPU's fused flash kernel",
    "aten::_scaled_dot_product_attention_math": "math (unfused, the scores kept whole)",
    "aten::_scaled_dot_product_fused_attention_overrideable": "a device's own fused kernel",
}
# words in the GPU kernels' names of each backend: FlashAttention-2's, CUTLASS's fmha, cuDNN's SDPA graphs
KERNEL_WORDS = ("flash_fwd", "flash_bwd", "fmha", "attention", "sdpa")
# attention by hand: softmax's own op over scores whose last two sides are equal (T x T, from the ops' recorded
# shapes) in a step with batched matmuls; a classifier's softmax (batch x classes) is not square. SDPA's math
# fallback calls _softmax too, from inside its own ops: those are SDPA's, not attention by hand
SOFTMAX_OP, MATMULS, MIN_T = "aten::_softmax", ("aten::bmm", "aten::baddbmm"), 16
SDPA_MATH = ("aten::_scaled_dot_product_attention_math", "aten::_safe_softmax")
# FlexAttention: Inductor names its kernels for the operator (triton_tem_fused_flex_attention_0, and _backward_);
# uncompiled, its eager reference runs as an autograd Function of that name
FLEX_WORD = "flex_attention"
FLEX_EAGER = "FlexAttentionAutogradOp"
FLEX_UNCOMPILED = "FlexAttention uncompiled: its eager reference, the scores kept whole"
BY_HAND = "by hand: a softmax between batched matmuls, its T x T scores kept for the backward"
KERNELS_SHOWN = 3


def reading(events) -> str | None:
    """What attention the events ran, in words, with its GPU kernels by name where there are any."""
    ops = {e.get("name") for e in events if e.get("cat") == "cpu_op"}
    flex = _kernels(events, (FLEX_WORD,))
    if flex:
        return "FlexAttention, compiled" + _named(flex)
    if any(op.startswith(FLEX_EAGER) for op in ops if op):
        return FLEX_UNCOMPILED
    backends = [words for op, words in BACKENDS.items() if op in ops]
    if not backends:
        return BY_HAND if by_hand([e for e in events if e.get("cat") == "cpu_op"])[0] else None
    return " and ".join(backends) + _named(_kernels(events, KERNEL_WORDS))


def by_hand(ops) -> tuple[int, int | None]:
    """(softmaxes over T x T scores, the largest T) among ops that hold batched matmuls; (0, None) where none."""
    if not any(e.get("name") in MATMULS for e in ops):
        return 0, None
    sdpa = [(e.get("ts", 0), e.get("ts", 0) + e.get("dur", 0)) for e in ops if e.get("name") in SDPA_MATH]
    sides = []
    for e in ops:
        dims = ((e.get("args") or {}).get("Input Dims") or [[]])[0]
        if e.get("name") == SOFTMAX_OP and len(dims) >= 3 and dims[-1] == dims[-2] >= MIN_T:
            if not any(start <= e.get("ts", 0) < end for start, end in sdpa):
                sides.append(dims[-1])
    return len(sides), max(sides, default=None)


def _kernels(events, words) -> list[str]:
    """The GPU kernels with any of `words` in their names, the longest-running first."""
    time = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "kernel" and any(w in name.lower() for w in words):
            time[name] = time.get(name, 0) + e.get("dur", 0)
    return sorted(time, key=time.get, reverse=True)[:KERNELS_SHOWN]


def _named(kernels: list[str]) -> str:
    return f" (kernels {', '.join(f'`{short(k)}`' for k in kernels)})" if kernels else ""


def short(kernel: str, most: int = 60) -> str:
    """A kernel's name less its template arguments and parameters, which run to hundreds of characters."""
    name = kernel.split("<", 1)[0].split("(", 1)[0].removeprefix("void ").strip()
    return name if len(name) <= most else name[:most - 3] + "..."
