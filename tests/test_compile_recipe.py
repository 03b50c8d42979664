"""`make recipe-compile` in smoke mode (inductor on the CPU: needs a C++ compiler)."""
import shutil

import pytest

from conftest import comparison_of

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                reason="torch.compile's CPU backend needs a C++ compiler")


def test_compile_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("compile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "compile")["workloads"]
    churn, resnet = workloads["churn_serving"]["parity"], workloads["resnet18"]["parity"]
    assert churn["ok"] and churn["what"] == "mean churn probability per served batch"
    assert churn["early_max_rel"] <= 1e-4  # serving: the same function, compiled
    assert resnet["ok"] and resnet["what"] == "training loss"


def test_compiled_graph_calls_fewer_ops_and_pays_on_the_first_step(smoke_run):
    """Eager runs one aten op per layer op; the compiled forward calls a few generated kernels
    (each a fused chain). Compiling happens in the first step, which the report shows apart."""
    _, reports = smoke_run("compile")
    for w, entry in comparison_of(reports, "compile")["workloads"].items():
        slow, fast = entry["slow"], entry["fast"]
        assert fast["evidence"]["phases"]["forward"]["ops"] < slow["evidence"]["phases"]["forward"]["ops"] / 3, w
        assert fast["host"]["first_step_s"] > slow["host"]["first_step_s"], w
    md = (reports / "compile.md").read_text()
    assert "first step, s (compilation, autotuning)" in md
    for entry in comparison_of(reports, "compile")["workloads"].values():
        c = entry["fast"]["compile"]  # fullgraph=True: one graph per compiled callable, no break
        assert c["graph_breaks"] == 0 and c["graphs"] >= 1 and entry["slow"]["compile"] is None
    assert md.count("graph break(s)") == 2
