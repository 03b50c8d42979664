"""The trace views TensorBoard's profiler plugin gave, read without torch (common/analysis/trace_views.py):
each instant of a step counted once, for the first of kernel, memcpy, memset, runtime, data loading,
CPU op; the GPU's figures from its kernels' records; the memory curve."""
import gzip
import json
from pathlib import Path

import pytest

from common.analysis import trace_views

H100 = Path(__file__).resolve().parent.parent / "data" / "h100-2026-11-22" / "traces"  # the first H100 run's, kept


def _x(name, cat, ts, dur, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "args": args}


def test_each_instant_of_a_step_counts_once_for_the_first_kind_that_fills_it():
    events = [_x("ProfilerStep#7", "user_annotation", 0, 100),
              _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 0, 20),
              _x("aten::mm", "cpu_op", 20, 50),  # CPU op 20-70, its launch inside it
              _x("cudaLaunchKernel", "cuda_runtime", 30, 10),
              _x("gemm", "kernel", 35, 40),  # the GPU 35-75: hides the launch's last 5 us and the op's 35-70
              _x("Memcpy HtoD", "gpu_memcpy", 60, 30)]  # 75-90 left to it
    (row,) = trace_views.breakdown(events)
    assert row["step"] == "7" and row["total_us"] == 100
    assert (row["kernel"], row["memcpy"], row["memset"], row["runtime"]) == (40, 15, 0, 5)
    assert (row["data loading"], row["CPU op"], row["other"]) == (20, 10, 10)
    assert sum(row[k] for k in trace_views.KINDS) == row["total_us"]


def test_a_cpu_trace_has_no_gpu_figures_and_its_step_is_ops_and_the_rest():
    events = [_x("ProfilerStep#0", "user_annotation", 0, 10), _x("aten::add", "cpu_op", 2, 5)]
    assert trace_views.gpu_figures(events) == {"gpu_utilization": None, "sm_efficiency": None,
                                               "achieved_occupancy": None}
    (row,) = trace_views.breakdown(events)
    assert (row["CPU op"], row["other"], row["kernel"]) == (5, 5, 0)


def test_gpu_figures_are_weighted_by_kernel_time():
    events = [_x("ProfilerStep#0", "user_annotation", 0, 100),
              _x("a", "kernel", 0, 30, **{"blocks per SM": 0.5, "est. achieved occupancy %": 20}),
              _x("b", "kernel", 50, 10, **{"blocks per SM": 4.0, "est. achieved occupancy %": 60})]
    g = trace_views.gpu_figures(events)
    assert g["gpu_utilization"] == pytest.approx(0.4)
    assert g["sm_efficiency"] == pytest.approx((0.5 * 30 + 1.0 * 10) / 100)  # over the window: never above util
    assert g["achieved_occupancy"] == pytest.approx((0.2 * 30 + 0.6 * 10) / 40)


def test_a_lagging_gpus_work_stays_with_the_step_that_launched_it_and_steps_never_overlap():
    """The plugin's bounds: step 1's kernel runs past its CPU range (to 30 us) and step 2's after it."""
    launch = lambda ts, c: _x("cudaLaunchKernel", "cuda_runtime", ts, 1, correlation=c)  # noqa: E731
    events = [_x("ProfilerStep#1", "user_annotation", 0, 10), launch(2, 1),
              {**_x("k1", "kernel", 5, 25, correlation=1, device=0, stream=7), "pid": 0, "tid": 7},
              _x("ProfilerStep#2", "user_annotation", 12, 8), launch(14, 2),
              {**_x("k2", "kernel", 30, 15, correlation=2, device=0, stream=7), "pid": 0, "tid": 7}]
    rows = trace_views.breakdown(events)
    assert [(r["start_us"], r["total_us"]) for r in rows] == [(0, 30), (30, 15)]
    assert [r["kernel"] for r in rows] == [25, 15] and sum(r["total_us"] for r in rows) == 45
    tl = trace_views.timeline(events, step=0)
    assert tl["span_us"] == 30 and [e[2] for e in tl["rows"]["GPU 0 stream 7"]] == ["k1"]  # step 1's kernel only


def test_the_tensor_core_reading_of_a_kernels_name():
    yes = ["sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32", "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
           "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "flash_fwd_kernel", "triton_tem_fused_mm_0"]
    no = ["sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_ffma",
          "void at::native::vectorized_elementwise_kernel",
          "cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel", "_INTERNAL_8a16816b_gemm_f32"]
    assert all(trace_views.tensor_cores(n) for n in yes), [n for n in yes if not trace_views.tensor_cores(n)]
    assert not any(trace_views.tensor_cores(n) for n in no), [n for n in no if trace_views.tensor_cores(n)]


def test_the_memory_curve_follows_each_devices_allocator(tmp_path):
    from common.render import trace_page

    mem = lambda ts, mb, device, index=0: {"ph": "i", "name": "[memory]", "ts": ts,  # noqa: E731
                                           "args": {"Total Allocated": mb * 2**20, "Device Type": device,
                                                    "Device Id": index}}
    trace = {"traceEvents": [mem(1, 5, 0, -1), mem(2, 100, 1), mem(3, 150, 1), mem(4, 6, 0, -1)]}
    assert trace_views.memory_curve(trace) == {"GPU 0": [(2, 100.0), (3, 150.0)]}  # the GPU's, not the CPU's
    assert trace_views.memory_curve({"traceEvents": [mem(1, 5, 0, -1)]}) == {"CPU": [(1, 5.0)]}
    two = trace_views.memory_curve({"traceEvents": [mem(1, 10, 1, 0), mem(2, 900, 1, 1), mem(3, 20, 1, 0)]})
    assert two == {"GPU 0": [(1, 10.0), (3, 20.0)], "GPU 1": [(2, 900.0)]}  # two curves, not one zigzag
    svg = trace_page.memory_svg(two)
    assert svg.count("<polyline") == 2 and ">GPU 1</text>" in svg and "900 MB" in svg


def test_compute_against_communication_counts_each_instant_once(tmp_path):
    """A data-parallel step: compute kernels 0-100 us and 150-200 us; NCCL's all-reduce 80-170 us on
    another stream: 90 us of communication, 40 of it under compute."""
    kernel = lambda name, ts, dur, stream: {"ph": "X", "cat": "kernel", "name": name, "ts": ts,  # noqa: E731
                                            "dur": dur, "args": {"stream": stream, "correlation": ts}}
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 210},
              kernel("sm90_xmma_gemm_bf16", 0, 100, 7), kernel("elementwise_kernel", 150, 50, 7),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 80, 90, 20)]
    assert trace_views.overlap(events) == {"compute_us": 150.0, "communication_us": 90.0, "overlapped_us": 40.0}
    assert trace_views.overlap(events[:3]) is None  # no communication: no such view


def test_the_first_h100_runs_amp_trace_reads_as_a_busy_gpu():
    v = trace_views.read(H100 / "amp_resnet18_fast.pt.trace.json.gz")
    assert v["gpu"] and len(v["breakdown"]) == 5 and v["gpu_utilization"] > 0.9
    assert v["sm_efficiency"] <= v["gpu_utilization"]
    rows = v["breakdown"]
    assert all(a["start_us"] + a["total_us"] <= b["start_us"] + 1e-6 for a, b in zip(rows, rows[1:]))  # no overlap
    assert 0 < v["sm_efficiency"] <= 1 and 0 < v["achieved_occupancy"] < 1 and v["memory"]
    for row in v["breakdown"]:
        assert abs(sum(row[k] for k in trace_views.KINDS) - row["total_us"]) < 1e-6 * row["total_us"]
    slow = json.load(gzip.open(H100 / "amp_resnet18_slow.pt.trace.json.gz", "rt"))
    assert trace_views.breakdown([e for e in slow["traceEvents"] if e.get("ph") == "X"])


def test_the_timeline_draws_a_call_below_its_caller_and_a_kernel_below_its_annotation():
    """CPU: an op inside another is one lane down. GPU: Kineto writes a gpu_user_annotation with the device
    and stream as pid and tid (no args), its kernels with them in args: one row; the annotation, which its
    one kernel fills exactly, above it."""
    events = [_x("ProfilerStep#1", "user_annotation", 0, 100),
              _x("aten::linear", "cpu_op", 10, 40), _x("aten::addmm", "cpu_op", 12, 30),
              _x("aten::relu", "cpu_op", 60, 5),
              {**_x("k", "kernel", 20, 10, correlation=1, device=0, stream=7), "pid": 0, "tid": 7},
              {"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "ts": 20, "dur": 10, "pid": 0, "tid": 7}]
    rows = trace_views.timeline(events)["rows"]
    gpu = {e[2]: e[4] for e in rows["GPU 0 stream 7"]}
    assert gpu == {"forward": 0, "k": 1}
    (cpu,) = [r for k, r in rows.items() if k.startswith("CPU")]
    assert {e[2]: e[4] for e in cpu} == {"ProfilerStep#1": 0, "aten::linear": 1, "aten::addmm": 2, "aten::relu": 1}


def test_a_trace_is_parsed_once_for_its_readers_and_again_once_it_changes(tmp_path):
    import json
    import os

    from common.analysis import traces

    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [_x("aten::mm", "cpu_op", 0, 5)]}))
    first = traces.read_trace(path)
    assert traces.read_trace(path) is first  # the evidence, the roofline and the page read one parse
    path.write_text(json.dumps({"traceEvents": [_x("aten::add", "cpu_op", 0, 5)]}))
    os.utime(path, ns=(1, 1))  # a rewrite within the clock's tick is still a new file
    assert traces.read_trace(path)["traceEvents"][0]["name"] == "aten::add"


def test_a_replayed_cuda_graphs_kernels_get_a_row_in_the_operator_table():
    """graph.replay() launches its kernels with one cudaGraphLaunch that no aten op encloses: their time was
    left out of the operator table; they now have the launch's row."""
    events = [_x("aten::mm", "cpu_op", 0, 50), _x("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
              _x("gemm", "kernel", 20, 30, correlation=1),
              _x("cudaGraphLaunch", "cuda_runtime", 100, 8, correlation=2),
              _x("k1", "kernel", 110, 40, correlation=2), _x("k2", "kernel", 150, 60, correlation=2)]
    rows = {r["name"]: r for r in trace_views.op_table(events, steps=1)}
    replay = rows["cudaGraphLaunch (CUDA graph replay)"]
    assert replay["device_self"] == replay["device_total"] == 100 and replay["calls"] == 1
    assert rows["aten::mm"]["device_self"] == 30
    assert list(rows)[0] == "cudaGraphLaunch (CUDA graph replay)"  # the most device time first
