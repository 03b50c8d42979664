"""FlexAttention under FlopCounterMode, which has no rule for its operators (torch 2.11: it refuses them,
and the counted step would fail). Counted as its kernel computes: the tiles its block mask lists, each a
matmul of queries by keys and one of scores by values forward, and five such backward (the scores
recomputed, as torch counts scaled_dot_product_attention's backward).

The counted step runs compiled code eagerly, so FlexAttention runs its reference there, which keeps
about nine fp32 B x heads x T x T tensors alive in its backward: 14 GB at GPT-2 small's 12 heads,
batch 2 and 4,096 tokens, more than a T4 has left. So the reference runs here in slices of queries that
fit in half the device's free memory, each with its masks' query index shifted to the slice's start:
the same sums, a slice at a time."""
import torch
from torch._higher_order_ops.flex_attention import flex_attention as forward_op
from torch._higher_order_ops.flex_attention import flex_attention_backward as backward_op
from torch.utils.flop_counter import _FlopCounterMode

BACKWARD_MATMULS = 5  # per 2 forward: scores again, dV, dP, dQ, dK (torch.utils.flop_counter's count)


def tile_flops(query: torch.Tensor, value: torch.Tensor, block_mask: tuple) -> int:
    """The forward's FLOPs over the tiles the block mask lists (its partial and its full ones), each tile
    cut to the sequences' lengths; a mask made for one batch or head counts for every one."""
    q_len, kv_len, kv_num, kv_indices, full_num, full_indices = block_mask[:6]  # BlockMask.as_tuple()'s order
    q_block, kv_block = block_mask[-3], block_mask[-2]
    batch, heads, _, d_qk = query.shape
    rows = (q_len - torch.arange(kv_num.shape[-1], device=kv_num.device) * q_block).clamp(max=q_block)
    pairs = 0
    for num, indices in ((kv_num, kv_indices), (full_num, full_indices)):
        if num is None:
            continue
        listed = torch.arange(indices.shape[-1], device=indices.device) < num.unsqueeze(-1)
        cols = (kv_len - indices * kv_block).clamp(min=0, max=kv_block) * listed
        per_mask = (rows.unsqueeze(-1) * cols).sum()
        pairs += int(per_mask) * (batch * heads // (num.shape[0] * num.shape[1]))
    return 2 * pairs * (d_qk + value.shape[-1])


def _forward_flops(query, key, value, score_mod, block_mask, *args, out_val=None, **kwargs) -> int:
    return tile_flops(query, value, block_mask)


def _backward_flops(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph, block_mask,
                    *args, out_val=None, **kwargs) -> int:
    return tile_flops(query, value, block_mask) * BACKWARD_MATMULS // 2


_forward_flops._get_raw = _backward_flops._get_raw = True  # FlopCounterMode hands them the tensors, not shapes
FORMULAS = {forward_op: _forward_flops, backward_op: _backward_flops}  # FlopCounterMode(custom_mapping=...)


REFERENCE_BYTES = 9 * 4  # per (batch, head, query, key): the reference backward's fp32 T x T tensors alive at once
ROWS = None  # queries per slice; None: as many as fit (tests set it)


def rows_that_fit(query: torch.Tensor, key: torch.Tensor) -> int:
    """Queries per slice of the reference: all of them on a CPU (its memory is the machine's), else as many
    as half the device's free memory holds (the allocator's cached blocks count as free)."""
    if ROWS is not None:
        return ROWS
    if query.device.type != "cuda":
        return query.size(-2)
    free, _ = torch.cuda.mem_get_info(query.device)
    free += torch.cuda.memory_reserved(query.device) - torch.cuda.memory_allocated(query.device)
    per_row = REFERENCE_BYTES * query.size(0) * query.size(1) * key.size(-2)
    return max(1, free // 2 // per_row)


def _shifted(fn, start: int, at: int):
    """fn with its query index (argument `at`) moved on by `start`: a slice's rows are the sequence's."""
    if start == 0:
        return fn
    return lambda *args: fn(*args[:at], args[at] + start, *args[at + 1:])


def _forward_in_slices(query, key, value, score_mod, block_mask, scale, kernel_options, *buffers):
    rows, T = rows_that_fit(query, key), query.size(-2)
    if rows >= T:
        return forward_op(query, key, value, score_mod, block_mask, scale, kernel_options, *buffers)
    parts = []
    for s in range(0, T, rows):
        mask = (*block_mask[:-1], _shifted(block_mask[-1], s, 2))  # mask_mod(b, h, q, kv): the reference reads it
        parts.append(forward_op(query[:, :, s:s + rows], key, value, _shifted(score_mod, s, 3), mask, scale,
                                kernel_options, *buffers))
    out, lse, top = (torch.cat(p, dim=2) for p in zip(*parts))
    return out, lse, top


def _backward_in_slices(query, key, value, out, lse, grad_out, grad_lse, fw_graph, joint_graph, block_mask, scale,
                        kernel_options, score_buffers=(), mask_buffers=()):
    rows, T = rows_that_fit(query, key), query.size(-2)
    if rows >= T:
        return backward_op(query, key, value, out, lse, grad_out, grad_lse, fw_graph, joint_graph, block_mask, scale,
                           kernel_options, score_buffers, mask_buffers)
    cut = lambda t, s: None if t is None else t[:, :, s:s + rows]  # noqa: E731
    dq, dk, dv, dbuf = [], None, None, None
    for s in range(0, T, rows):
        mask = (*block_mask[:-1], _shifted(block_mask[-1], s, 2))
        q, k, v, bufs = backward_op(cut(query, s), key, value, cut(out, s), cut(lse, s), cut(grad_out, s),
                                    cut(grad_lse, s), _shifted(fw_graph, s, 3), _shifted(joint_graph, s, 3), mask,
                                    scale, kernel_options, score_buffers, mask_buffers)
        dq.append(q)
        dk, dv = (k, v) if dk is None else (dk + k, dv + v)  # each slice's queries add to every key's gradient
        dbuf = bufs if dbuf is None else tuple(None if a is None else a + b for a, b in zip(dbuf, bufs))
    return torch.cat(dq, dim=2), dk, dv, dbuf


def _counted(op, run_op):
    def run(mode, *args):
        """The operator run under the counter (popped: its reference's own matmuls are not the kernel's),
        in slices that fit, then counted by its formula over the whole call."""
        return mode.counter._count_flops(op, run_op(*args), args, {})
    return run


for _op, _run in ((forward_op, _forward_in_slices), (backward_op, _backward_in_slices)):
    if _FlopCounterMode not in _op.python_key_table:
        _op.py_impl(_FlopCounterMode)(_counted(_op, _run))
