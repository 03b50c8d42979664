"""float8 training needs float8 tensor cores (sm_89+): on this CPU the recipe is not applicable and nothing
is timed. Under a simulated H100's profile its twins run as far as a CPU can run them: torchao's
Float8Linear and torch._scaled_mm have CPU kernels, torch.compile is left out (conftest.SUITE_ENV), and
the twins pass the recipe's parity (tests/integration/test_recipes.py's smoke run)."""
from pathlib import Path

import pytest

from common import catalog
from common.analysis import device, traces

from conftest import REPO, comparison_of, run_module

FLAGS = ["--device", "cpu", "--smoke", "--data", "synthetic"]


def test_on_a_cpu_float8_is_not_applicable_and_nothing_is_timed(tmp_path):
    proc = run_module("common.runners.compare", "float8", *FLAGS, "--reports-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    why = "no float8 tensor cores (Ada, sm_89, and newer: an L4, an H100)"
    assert "float8: not applicable on CPU" in proc.stdout and why in proc.stdout and "nothing timed" in proc.stdout
    assert why in (tmp_path / "float8.md").read_text()
    written = {p.name for p in tmp_path.glob("results/float8/*/*.json")}
    assert written == {"comparison.json"}, written  # the comparison says why; no run, no run's result
    for name, lacks in (("T4", True), ("A100", True), ("L4", False), ("H100", False)):
        assert (catalog.not_applicable("float8", device.SIMULATED[name]) is not None) == lacks, name


@pytest.mark.recipe("float8")
def test_under_a_simulated_h100_the_float8_twin_runs_scaled_matmuls_and_keeps_parity(smoke_run):
    """The smoke run of tests/integration/test_recipes.py (conftest.simulated_for: an H100's profile, uncompiled)."""
    proc, reports = smoke_run("float8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = comparison_of(reports, "float8")["workloads"]["gpt"]
    assert entry["slow"]["env"]["profile"]["name"] == "NVIDIA H100 80GB HBM3" and entry["parity"]["ok"]
    ops = {}
    for v in ("slow", "fast"):  # every op of the profiled steps, nested ones too (the roofline keeps the outermost)
        trace = next(p for p in (Path(entry[v]["evidence"]["trace"]), reports / entry[v]["evidence"]["trace"],
                                 REPO / entry[v]["evidence"]["trace"]) if p.exists())
        ops[v] = {e["name"] for e in traces.profiled(trace)[0] if e.get("cat") == "cpu_op"}
    assert "aten::_scaled_mm" not in ops["slow"]
    assert {"aten::_scaled_mm", "matmul_with_hp_or_float8_args"} <= ops["fast"], sorted(ops["fast"])  # Float8Linear's
