"""FlexAttention under FlopCounterMode, which has no rule for its operators (torch 2.11: it refuses them,
and the counted step would fail). Counted as its kernel computes: the tiles its block mask lists, each a
matmul of queries by keys and one of scores by values forward, and five such backward (the scores
recomputed, as torch counts scaled_dot_product_attention's backward)."""
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


def _counted(op):
    def run(mode, *args):
        """The operator run under the counter (popped: its dense reference's own matmuls are not the
        kernel's), then counted by its formula."""
        return mode.counter._count_flops(op, op(*args), args, {})
    return run


for _op in FORMULAS:
    if _FlopCounterMode not in _op.python_key_table:
        _op.py_impl(_FlopCounterMode)(_counted(_op))
