"""The roofline per op and the trace diff (common/analysis/roofline.py, common/render/roofline.py): FLOPs
and bytes from a trace's shapes, checked against a hand-made trace and against FlopCounterMode on the
first H100 run's traces; each op placed under this machine's ceilings; two traces diffed by name."""
import json

import pytest

from common.analysis import roofline
from common.analysis.results_run import Ceilings

from conftest import REPO, run_module

H100 = REPO / "tests" / "data" / "h100-2026-11-22"
# a stand-in for that card's ceilings (its bf16 matmul measured 798 TFLOP/s on 2026-11-22; the rest is
# datasheet-sized): the test checks that every op gets its place, not the figures
CEILINGS = Ceilings(gpu="NVIDIA H100 80GB HBM3", bf16_tflops=798, tf32_tflops=400, fp32_tflops=60, bandwidth_gbs=3000,
                    how="test", date="2026-11-22")


def _op(name, dims, types, ts, dur, concrete=None, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}}


def test_a_hand_made_trace_gives_each_op_its_exact_flops_and_bytes(tmp_path):
    m, k, n = 64, 128, 32
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
              _op("aten::linear", [[m, k], [n, k], [n]], ["float"] * 3, 10, 100),
              _op("aten::addmm", [[n], [m, k], [k, n], [], []], ["float"] * 3 + ["Scalar"] * 2, 12, 90),
              _op("aten::mm", [[m, k], [k, n]], ["c10::BFloat16"] * 2, 200, 50),
              _op("aten::convolution", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
                  ["float"] * 3 + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"], 300, 200,
                  ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]),
              _op("aten::relu_", [[8, 16, 32, 32]], ["float"], 510, 20),
              _op("aten::index", [[10]], ["float"], 600, 30)]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = roofline.read(path, cuda=False, ceilings=Ceilings(bf16_tflops=1.0, fp32_tflops=0.5, bandwidth_gbs=10.0))
    ops = {(o.name, o.dtype): o for o in r.ops}
    addmm = ops["aten::addmm", "float32"]  # counted once: linear is not modelled, addmm inside it is
    assert addmm.flops == 2 * m * k * n + m * n and addmm.bytes == (n + m * k + k * n + m * n) * 4
    assert addmm.ms == 0.09 and addmm.calls == 1
    mm = ops["aten::mm", "bfloat16"]
    assert mm.flops == 2 * m * k * n and mm.bytes == (m * k + k * n + m * n) * 2
    assert mm.roof_ms == pytest.approx(max(mm.flops / 1e12, mm.bytes / 10e9) * 1000) and mm.bound == "memory"
    conv = ops["aten::convolution", "float32"]  # 8 x 16 x 32 x 32 outputs, 3 x 3 x 3 MACs each
    assert conv.flops == 2 * 8 * 16 * 32 * 32 * 27
    assert conv.bytes == (8 * 3 * 32 * 32 + 16 * 27 + 16 + 8 * 16 * 32 * 32) * 4
    assert ops["aten::relu_", "float32"].flops == 8 * 16 * 32 * 32
    assert r.unmodelled_ms == {"aten::linear": pytest.approx(0.01), "aten::index": 0.03}  # linear's own, index's


@pytest.mark.parametrize("variant", ["slow", "fast"])
def test_on_the_h100_traces_the_modelled_flops_match_flop_counter_mode(variant):
    saved = json.loads((H100 / "amp.comparison.json").read_text())["workloads"]["resnet18"][variant]
    r = roofline.read(H100 / "traces" / f"amp_resnet18_{variant}.pt.trace.json.gz", cuda=True, ceilings=CEILINGS)
    tensor = sum(o.flops for o in r.ops if o.kind in ("matmul", "convolution", "attention"))
    assert tensor == pytest.approx(saved["flops_per_step"], rel=0.05)  # measured: within 0.01%
    assert all(o.bound in ("compute", "memory") and o.reached is not None for o in r.ops if o.ms)
    convs = [o for o in r.ops if o.kind == "convolution"]
    assert convs and all(o.bound == "compute" for o in convs)  # ResNet-18's convolutions sit above the ridge
    largest, ms = next(iter(r.unmodelled_ms.items()))
    share = ms / r.busy_ms
    print(f"{variant}: modelled {r.modelled_ms / r.busy_ms:.1%} of the GPU's busy time; the largest unmodelled op "
          f"{largest} {share:.2%}")
    assert largest == "aten::grid_sampler_2d" and share < 0.01  # the device-side crop, not modelled
    assert r.modelled_ms + sum(r.unmodelled_ms.values()) == pytest.approx(r.busy_ms, rel=0.05)


def test_the_trace_diff_of_the_amp_pair_names_the_convolutions_change_first(tmp_path):
    traces = H100 / "traces"
    proc = run_module("common.render.roofline", str(traces / "amp_resnet18_slow.pt.trace.json.gz"),
                      str(traces / "amp_resnet18_fast.pt.trace.json.gz"), "--out", str(tmp_path / "diff.md"))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.split("op ")[1].splitlines()[1]
    assert first.startswith("aten::convolution_backward") and first.rstrip().endswith("faster")
    md = (tmp_path / "diff.md").read_text()
    assert "| `aten::convolution_backward` | 9.152 | 4.983 | -4.169 | faster |" in md
    assert "| kernel | A ms | B ms | change ms | |" in md  # and the kernels, matched by name
    # the whole step first, so that an op 4 ms faster reads against the step it belongs to
    step = next(line for line in proc.stdout.splitlines() if line.startswith("a whole profiled step (wall)"))
    assert step.rstrip().endswith("x faster") and "- A whole profiled step (wall): A " in md


def test_trace_diff_without_its_traces_says_its_own_usage_in_one_line():
    proc = run_module("common.render.roofline")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("make trace-diff A=before.pt.trace.json B=after.pt.trace.json: error: ")
    assert "A, B" in proc.stderr


def test_a_missing_trace_is_one_line(tmp_path):
    proc = run_module("common.render.roofline", str(tmp_path / "none.json"), str(tmp_path / "none.json"))
    assert proc.returncode == 2 and "no such trace" in proc.stderr and proc.stderr.count("\n") == 1
