"""The evidence read from a profiler trace (common.measure.profiling), on hand-made traces."""
import json

from common.measure import profiling


def test_trace_evidence_counts_syncs_kernels_and_idle(tmp_path):
    """A hand-made CUDA-style trace: 2 steps, 3 kernels, 1 sync; the GPU busy 30 of 100 us."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 50, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 11, "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": 10},  # overlaps k1: counted once
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 60, "dur": 15},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    ev = profiling.trace_evidence(path, torch.device("cuda"))
    assert ev["profiled_steps"] == 2 and ev["kernels_per_step"] == 1.5 and ev["syncs_per_step"] == 0.5
    assert abs(ev["gpu_idle_share"] - 0.7) < 1e-9
    assert ev["sync_ms_per_step"] == 0.0025  # the read and the sync inside it, 5 us, counted once over 2 steps
    assert ev["gpu_busy_ms_per_step"] == 0.015 and ev["profiled_step_ms"] == 0.05
    # the GPU is idle 70 us, none of it while the host waits in the sync (the GPU is busy then)
    assert abs(ev["idle_host_busy_ms_per_step"] - 0.035) < 1e-12
    cpu = profiling.trace_evidence(path, torch.device("cpu"))
    assert cpu["syncs_per_step"] == 0.5 and cpu["kernels_per_step"] is None


def test_phase_evidence_attributes_kernels_by_correlation_and_counts_top_level_ops(tmp_path):
    """A hand-made CUDA-style trace of 1 step: the optimizer range calls 2 ops (one with a nested
    op) and launches 2 kernels; a launch on another thread inside the same time span is not its own."""
    ann = lambda name, ts, dur, tid=1: {"ph": "X", "cat": "user_annotation", "name": name,  # noqa: E731
                                        "ts": ts, "dur": dur, "tid": tid}
    events = [
        ann("ProfilerStep#1", 0, 100),
        ann("optimizer", 50, 40),
        {"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_add_", "ts": 52, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "ts": 53, "dur": 2, "tid": 1},  # nested: not a call
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul_", "ts": 70, "dur": 5, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 55, "dur": 1, "tid": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 71, "dur": 1, "tid": 1,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 60, "dur": 1, "tid": 2,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "k7", "ts": 58, "dur": 4, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k8", "ts": 75, "dur": 6, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "k9", "ts": 62, "dur": 50, "args": {"correlation": 9}},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    opt = profiling.trace_evidence(path, torch.device("cuda"), ("optimizer", "forward"))["phases"]["optimizer"]
    assert opt == {"host_ms": 0.04, "ops": 2, "kernels": 2, "kernel_ms": 0.01}
    cpu = profiling.trace_evidence(path, torch.device("cpu"), ("optimizer",))["phases"]["optimizer"]
    assert cpu["ops"] == 2 and cpu["kernels"] is None


def test_a_sync_is_a_device_read_or_a_sync_call_on_its_own(tmp_path):
    """Per step: a scalar read with the sync call inside it counts once; a sync call on its own
    counts; a read of a CPU tensor inside optimizer.step() (Adam's step counter) does not; the
    profiler's own synchronize after the last step lies outside the steps and does not count."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 10, "dur": 5, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 11, "dur": 3, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 30, "dur": 4, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#Adam.step", "ts": 50, "dur": 20, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 55, "dur": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 150, "dur": 60, "tid": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 10},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    import torch

    ev = profiling.trace_evidence(path, torch.device("cuda"))
    assert ev["syncs_per_step"] == 2 and ev["sync_ms_per_step"] == 0.009


def test_a_trace_read_after_its_run_gives_the_evidence_its_run_would_have_written(tmp_path, monkeypatch):
    """make tour's children leave their traces unread (UnreadTrace, through JSON); make finalize reads
    them elsewhere: the same evidence, TF32 state, ceilings, parameters and op tables included."""
    import torch

    from common.analysis.results_run import Ceilings, UnreadTrace
    from common.measure import stages

    monkeypatch.setattr(stages.ceiling, "for_run", lambda device: Ceilings(gpu="CPU test", fp32_tflops=0.2,
                                                                            bf16_tflops=0.4, bandwidth_gbs=20.0))
    cpu = torch.device("cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters())
    with profiling.profiler(tmp_path, "w", cpu, 2) as prof:
        for _ in range(3):
            loss = model(torch.randn(8, 16)).square().mean()
            loss.item()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    now = stages.read_evidence(prof, cpu, 2, [opt])
    unread = stages.unread(prof, cpu, 2, [opt])
    later = stages.read_trace(UnreadTrace.from_json(json.loads(json.dumps(unread.to_json()))))
    assert later.to_json() == now.to_json()
    assert now.syncs_per_step == 1 and now.roofline.ops and unread.params == {"float": 16 * 32 + 32 + 32 * 4 + 4}
