"""The attention a trace shows, named from its ops and a GPU's kernels (common.analysis.attention). The
CUDA traces are stand-ins with the op and kernel names torch 2.11 writes on each device: cuDNN's SDPA
graphs on an H100 (torch 2.11 prefers them on sm_90 with cuDNN 9.15+), FlashAttention-2 on an A100 or an
L4, CUTLASS's memory-efficient kernels on a T4 (sm_75, fp32: flash and cuDNN need 16-bit and sm_80),
the CPU's own flash kernel; FlexAttention's Triton templates as Inductor names them, and its eager
reference."""
import pytest

from common.analysis import attention


def op(name, *dims):
    return {"cat": "cpu_op", "name": name, "dur": 10, "args": {"Input Dims": list(dims)}}


def kernel(name, dur=100):
    return {"cat": "kernel", "name": name, "dur": dur}


SDPA = op("aten::scaled_dot_product_attention")
GEMM = kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
              500)
DEVICES = {
    "A100, flash": ([SDPA, op("aten::_scaled_dot_product_flash_attention"), GEMM,
                     kernel("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, "
                            "128, 4, false, false, cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)",
                            300),
                     kernel("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
                            "Flash_bwd_kernel_traits<64>>(pytorch_flash::Flash_bwd_params)", 600)],
                    "flash (kernels `pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`, "
                    "`pytorch_flash::flash_fwd_kernel`)"),
    "T4, memory-efficient": ([SDPA, op("aten::_scaled_dot_product_efficient_attention"),
                              kernel("fmha_cutlassF_f32_aligned_64x64_rf_sm75(PyTorchMemEffAttention::AttentionKernel"
                                     "<float, cutlass::arch::Sm75, true, 64, 64, 64, true, true>::Params)", 900)],
                             "memory-efficient (kernels `fmha_cutlassF_f32_aligned_64x64_rf_sm75`)"),
    "H100, cuDNN (torch 2.11's first choice on sm_90)": ([SDPA, op("aten::_scaled_dot_product_cudnn_attention"),
                     kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
                            200)],
                    "cuDNN (kernels `cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f...`)"),
    "CPU": ([SDPA, op("aten::_scaled_dot_product_flash_attention_for_cpu")], "the CPU's fused flash kernel"),
    "math": ([SDPA, op("aten::_scaled_dot_product_attention_math"), op("aten::_softmax"), op("aten::bmm")],
             "math (unfused, the scores kept whole)"),
}


@pytest.mark.parametrize("device", DEVICES)
def test_each_backend_is_named_by_its_op_and_its_kernels(device):
    events, words = DEVICES[device]
    assert attention.reading(events) == words


def test_a_softmax_over_t_by_t_scores_between_matmuls_is_attention_by_hand_and_nothing_else_is():
    scores = [8, 4, 64, 64]  # batch x heads x T x T
    by_hand = [op("aten::bmm"), op("aten::softmax", scores), op("aten::_softmax", scores), op("aten::masked_fill")]
    assert attention.reading(by_hand) == attention.BY_HAND
    assert attention.by_hand(by_hand) == (1, 64)  # softmax's own op counted once, not its wrapper too
    assert attention.reading([op("aten::convolution"), op("aten::_log_softmax", [8, 10]), GEMM]) is None
    assert attention.reading([op("aten::_softmax", [8, 10]), op("aten::addmm")]) is None  # a classifier's softmax
    # a classifier's softmax in a step with batched matmuls is not square: not attention
    assert attention.reading([op("aten::bmm"), op("aten::_softmax", [8, 10])]) is None


def test_flexattention_is_named_by_the_kernels_inductor_generated_or_as_its_uncompiled_reference():
    compiled = [op("CompiledFunction"), op("## Call CompiledFxGraph fabc ##"), GEMM,
                kernel("triton_tem_fused_flex_attention_0", 300),
                kernel("triton_tem_fused_flex_attention_backward_1", 700),
                kernel("triton_per_fused__to_copy_native_layer_norm_2", 50)]
    assert attention.reading(compiled) == ("FlexAttention, compiled (kernels "
                                           "`triton_tem_fused_flex_attention_backward_1`, "
                                           "`triton_tem_fused_flex_attention_0`)")
    # uncompiled, its reference computes a softmax between matmuls, yet it is FlexAttention, not attention by hand
    eager = [op("FlexAttentionAutogradOp"), op("aten::bmm"), op("aten::_softmax"), op("aten::mm")]
    assert attention.reading(eager) == attention.FLEX_UNCOMPILED


def test_sdpas_math_fallback_is_not_attention_by_hand():
    """_safe_softmax (SDPA's math path, torch 2.11) calls _softmax over the T x T scores: inside SDPA's span it
    is SDPA's (a float64 step, sdpa_kernel(MATH), a mask a fused kernel refuses), not attention to rewrite."""
    scores = [8, 4, 64, 64]
    inside = [dict(op("aten::_scaled_dot_product_attention_math"), ts=100, dur=50),
              dict(op("aten::_safe_softmax", scores), ts=110, dur=20),
              dict(op("aten::_softmax", scores), ts=112, dur=10),
              dict(op("aten::bmm"), ts=105, dur=3)]
    assert attention.by_hand(inside) == (0, None)
    outside = [*inside, dict(op("aten::_softmax", scores), ts=300, dur=10)]  # and a hand-written one later
    assert attention.by_hand(outside) == (1, 64)
