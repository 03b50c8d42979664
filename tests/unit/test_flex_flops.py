"""FlexAttention under FlopCounterMode (common.measure.flex_flops): torch 2.11 has no rule for its operators,
and a counted step that calls it failed. Counted by the tiles its block mask lists, as its kernel
computes them; on this CPU its backward runs through the simulated GPU's stand-in (common.measure.rig)."""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.flop_counter import FlopCounterMode

from common.measure import flex_flops, rig
from common.measure.stages import eager_compiled

WINDOW, T, B, H, D = 8, 300, 2, 2, 16


def near(b, h, q, k):
    return (q >= k) & (q - k < WINDOW)


def test_the_tiles_a_sliding_window_lists_are_counted_cut_to_the_sequence():
    mask = create_block_mask(near, None, None, T, T, device="cpu")
    q, v = torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)
    # 128-token tiles: the first row of tiles holds its diagonal tile, the second and third their diagonal
    # and the tile before it (the window crosses the edge); the third row and column are 44 tokens long
    pairs = 128 * 128 + 128 * (128 + 128) + 44 * (128 + 44)
    assert flex_flops.tile_flops(q, v, mask.as_tuple()) == B * H * 2 * pairs * (D + D)
    dense = create_block_mask(lambda b, h, q, k: q >= 0, None, None, T, T, device="cpu")  # every pair
    assert flex_flops.tile_flops(q, v, dense.as_tuple()) == B * H * 2 * T * T * (D + D)


def test_a_counted_step_counts_flexattention_by_its_tiles_and_not_its_reference_matmuls(dynamo_counters_kept):
    mask = create_block_mask(near, None, None, T, T, device="cpu")
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    with rig.flex_trains_here():
        flex = torch.compile(flex_attention)  # the stand-in's: dynamo's eager backend, as the recipe's twin compiles it
        counter = FlopCounterMode(display=False, custom_mapping=flex_flops.FORMULAS)
        with eager_compiled(), counter:  # as common.measure.stages.counted runs its step
            flex(q, k, v, block_mask=mask).sum().backward()
    counts = {type(op).__name__: n for op, n in counter.get_flop_counts()["Global"].items()}
    forward = flex_flops.tile_flops(q, v, mask.as_tuple())
    assert counts == {"FlexAttentionHOP": forward, "FlexAttentionBackwardHOP": forward * 5 // 2}, counts
    assert q.grad is not None and k.grad.abs().sum() > 0  # it trained


def test_the_counted_reference_in_slices_of_queries_gives_the_whole_ones_outputs_and_gradients(monkeypatch,
                                                                                             dynamo_counters_kept):
    """On a GPU with little memory left the counted step runs FlexAttention's reference a slice of queries at
    a time (flex_flops.rows_that_fit), each slice's mask told where its rows start: the same numbers."""
    mask = create_block_mask(near, None, None, T, T, device="cpu")
    with rig.flex_trains_here():
        flex = torch.compile(flex_attention)

        def counted(rows):
            monkeypatch.setattr(flex_flops, "ROWS", rows)
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
            counter = FlopCounterMode(display=False, custom_mapping=flex_flops.FORMULAS)
            with eager_compiled(), counter:
                out = flex(q, k, v, block_mask=mask)
                (out * torch.linspace(-1, 1, D)).sum().backward()
            return out.detach(), [t.grad for t in (q, k, v)], counter.get_total_flops()

        whole, sliced = counted(None), counted(64)  # 300 queries: five slices, the last of 44
    torch.testing.assert_close(sliced[0], whole[0], rtol=0, atol=1e-6)
    for a, b in zip(sliced[1], whole[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert sliced[2] == whole[2]  # counted once, over the whole call
    assert flex_flops.rows_that_fit(torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)) == 64
    monkeypatch.setattr(flex_flops, "ROWS", None)
    assert flex_flops.rows_that_fit(torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)) == T  # a CPU: all at once


def test_on_a_gpu_a_slice_holds_the_queries_half_the_free_memory_can_take(monkeypatch):
    """rows_that_fit's CUDA branch, on a stand-in query of the pair's CUDA sizes (batch 2, 12 heads, 4,096 tokens):
    a T4 with 3 GB free, 1 GB of it cached by the allocator, and an H100 with 60 GB free."""
    import types

    def on_gpu(free_gb, cached_gb):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free_gb * 2**30, 16 * 2**30))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: (cached_gb + 5) * 2**30)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 5 * 2**30)
        q = types.SimpleNamespace(device=torch.device("cuda", 0), size=lambda d=None: (2, 12, 4096, 64)[d])
        return flex_flops.rows_that_fit(q, q)

    per_row = flex_flops.REFERENCE_BYTES * 2 * 12 * 4096
    assert on_gpu(3, 1) == 4 * 2**30 // 2 // per_row == 606  # the allocator's cache counts as free
    assert on_gpu(60, 0) == 60 * 2**30 // 2 // per_row >= 4096  # an H100 takes the whole sequence at once
    assert on_gpu(0, 0) == 1  # a full device still makes progress, a row at a time
