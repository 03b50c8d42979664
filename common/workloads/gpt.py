"""The gpt workload: a decoder-only transformer in nanoGPT's shape (pre-LayerNorm blocks, causal
self-attention, a 4x GELU MLP, the token embedding tied to the output layer) trained on Tiny
Shakespeare's characters. A step's samples are its tokens (batch x context), so its throughput is
tokens/s.

On a GPU it has GPT-2 small's shape (12 layers, 12 heads, 768 wide, 1,024 tokens of context); tiny on
a CPU and in smoke. Dropout is 0 everywhere: attention backends then differ by their arithmetic only,
never by their random streams."""
import contextlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, noop_context_fn

from common.errors import CookbookError
from common.workload_specs import WorkloadSpec
from common.workloads import host_arrays

WORKLOAD = WorkloadSpec(
    title="a GPT on Tiny Shakespeare",
    order=2,
    sizes={
        "cuda": {"batch_size": 8, "steps": 40, "warmup": 10, "profile_steps": 3, "min_time": 2.0,
                 "context": 1024, "window": 1024, "layers": 12, "heads": 12, "width": 768},
        "cpu": {"batch_size": 4, "steps": 12, "warmup": 3, "profile_steps": 1, "min_time": 2.0,
                "context": 128, "window": 128, "layers": 2, "heads": 4, "width": 128},
        "smoke": {"batch_size": 2, "steps": 3, "warmup": 1, "profile_steps": 1, "min_time": 0.0,
                  "context": 32, "window": 32, "layers": 1, "heads": 2, "width": 32},
    },
    size_flags={"context": "tokens of context per sequence",
                "window": "tokens each position attends to, itself included, where a recipe's attention has a "
                          "sliding window (flex_attention); the context's length elsewhere",
                "layers": "transformer blocks",
                "heads": "attention heads (they divide the width)", "width": "the embedding's width"},
    # GPT-2 small's step is ~1 s on a T4 in fp32 (6 x 86 M weights x 8,192 tokens, ~8 TFLOP/s): fewer steps there
    gpu_class_steps={"T4": {"steps": 15, "warmup": 5}, "L4": {"steps": 25, "warmup": 8}},
    row_samples="context",
    sample="token",
    load="common.workloads.shakespeare:load",
    check="common.workloads.shakespeare:check",
    locate="common.workloads.shakespeare:locate",
    dataset="shakespeare",
    data_help="FILE.txt",
)


def causal_attention(q, k, v):
    """PyTorch's fused attention, causal: what a GPT uses unless a recipe hands it another."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        return self.proj(self.attention(q, k, v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, attention):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), SelfAttention(width, heads, attention)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocabulary: int, context: int, layers: int, heads: int, width: int, attention=causal_attention):
        super().__init__()
        if width % heads:
            raise CookbookError(f"--heads {heads} does not divide --width {width}")
        self.tokens, self.positions = nn.Embedding(vocabulary, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.tokens.weight  # tied: one matrix embeds and reads out
        self.apply(_init)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Checkpointed(nn.Module):
    """A block run under activation checkpointing: what its forward saves for the backward is what
    `context_fn`'s policy keeps (nothing, by default: the block's forward runs again in the backward)."""

    def __init__(self, block: nn.Module, context_fn=noop_context_fn):
        super().__init__()
        self.block, self.context_fn = block, context_fn

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False, context_fn=self.context_fn)


def checkpoint_blocks(net: GPT, context_fn=noop_context_fn) -> GPT:
    """Each transformer block checkpointed on its own (torchtitan's per-block AC): the same parameters, so
    twins built from one seed start alike."""
    for i, block in enumerate(net.blocks):
        net.blocks[i] = Checkpointed(block, context_fn)
    return net


def _init(module):
    """GPT-2's initialisation (nanoGPT's): normal(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _text(run):
    tokens, vocabulary, source = host_arrays("gpt", run.data)
    run.record_data_source(source)
    return tokens, vocabulary


def model(run, attention=causal_attention) -> GPT:
    """The run's GPT at its sizes, on its device; its FLOPs per token (6N and the attention term, as PaLM's
    appendix counts them) recorded in the result beside the profiler's count."""
    _, vocabulary = _text(run)
    s = run.config.sizes
    if s["window"] < s["context"] and "window" not in run.extra:
        raise CookbookError(f"--window {s['window']}: this recipe's attention sees the whole context "
                            f"({s['context']} tokens); the flex_attention recipe's twins read --window")
    net = GPT(len(vocabulary), s["context"], s["layers"], s["heads"], s["width"], attention).to(run.device)
    run.extra["flops_per_token"] = flops_per_token(net, s)
    run.extra["causal"] = causal(net)  # the attention pair's parity compares it (recipes/attention)
    run.extra["reach"] = reach(attention, s, run.device)  # and flex_attention's, whose twins could mask other windows
    return net


def window(run) -> int:
    """The run's attention window (--window): each position attends to itself and the window-1 tokens before
    it (recipes/flex_attention's twins mask it; `reach` measures what a model's mask does)."""
    s = run.config.sizes
    if s["window"] > s["context"]:
        raise CookbookError(f"--window {s['window']} is longer than the context ({s['context']} tokens)")
    run.extra["window"] = s["window"]
    return s["window"]


def reach(attention, sizes: dict, device) -> int:
    """How many queries a change of the first key and value moves, in one call of the model's attention on
    random queries, keys and values twice the window long (the context at most): the window, for a
    sliding window; the whole length, for attention over the whole context. Exact: a masked key weighs
    exactly 0, so a query outside the window moves by exactly 0. Twins that mask different windows differ in it."""
    T, d = min(sizes["context"], 2 * sizes["window"]), sizes["width"] // sizes["heads"]
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, d, generator=g, device=device) for _ in range(3))
    k2, v2 = k.clone(), v.clone()
    k2[..., 0, :] += 1
    v2[..., 0, :] += 1
    with torch.no_grad(), _uncompiled():
        moved = (attention(q, k, v) - attention(q, k2, v2)).abs().amax(dim=-1)
    return int((moved > 0).sum())


def _uncompiled():
    """The model's probes run eagerly: a compiled attention (FlexAttention's) would compile for their shapes
    too, and its compilation would count as the run's."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled yet, and importing dynamo costs a second
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def causal(net: GPT) -> bool:
    """Does each position's output ignore the tokens after it? Two windows that share their first half:
    a causal model's logits over that half do not move (to rounding), while one whose attention sees
    the future moves them about as much as the second half's. Its training loss would show it only
    after hundreds of steps, when the model has learnt to read the next token. On the initial weights,
    with a generator of its own: the run's random stream is untouched. 256 tokens at most: causality shows at
    any length, and a hand-written attention at 8,192 would need gigabytes for its scores here."""
    T, device = min(net.positions.num_embeddings, 256), net.positions.weight.device
    g = torch.Generator(device=device).manual_seed(0)
    first = torch.randint(net.tokens.num_embeddings, (1, T), generator=g, device=device)
    second, half = first.clone(), T // 2
    second[:, half:] = torch.randint(net.tokens.num_embeddings, (1, T - half), generator=g, device=device)
    with torch.no_grad(), _uncompiled():
        moved = (net(first) - net(second)).abs()
    return bool(moved[:, :half].max() <= 1e-4 * moved[:, half:].max())


def flops_per_token(net: GPT, sizes: dict) -> dict:
    """Training FLOPs per token: 6 per weight (the position table aside, a lookup) plus 12 x layers x
    context x width for attention's two matmuls, forward and backward (PaLM's count: the causal half
    is not taken off); a sliding window's positions attend to `window` keys, not the context's."""
    weights = sum(p.numel() for p in net.parameters()) - net.positions.weight.numel()
    attention = 12 * sizes["layers"] * min(sizes["window"], sizes["context"]) * sizes["width"]
    return {"weights": weights, "dense": 6 * weights, "attention": attention, "total": 6 * weights + attention}


class Windows:
    """Endless batches of run.batch_size windows of the text, each `context` tokens and its next-token
    targets, drawn from the run's generator on the device: twins of one seed see the same tokens."""

    def __init__(self, tokens: torch.Tensor, batch_size: int, context: int, generator: torch.Generator):
        self.tokens, self.batch_size, self.context, self.generator = tokens, batch_size, context, generator
        self.offsets = torch.arange(context + 1, device=tokens.device)

    def __iter__(self):
        last = len(self.tokens) - self.context - 1
        while True:
            start = torch.randint(last, (self.batch_size, 1), device=self.tokens.device, generator=self.generator)
            window = self.tokens[start + self.offsets]
            yield window[:, :-1], window[:, 1:]


def train_batches(run) -> Windows:
    tokens, _ = _text(run)
    if len(tokens) <= run.config.sizes["context"] + 1:
        raise ValueError(f"the text has {len(tokens):,} tokens, too few for --context {run.config.sizes['context']}")
    return Windows(torch.from_numpy(tokens).to(run.device), run.batch_size, run.config.sizes["context"],
                   run.generator)


def loss_of(logits, targets):
    """Next-token cross-entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
