"""FlexAttention trains on a GPU only (torch has no CPU backward for it): on this CPU the recipe is not
applicable and nothing is timed. Under a simulated A100's profile its twins run as far as a CPU can run
them (common.measure.rig.flex_trains_here: FlexAttention's eager reference, compiled with dynamo's eager
backend) and pass the recipe's parity (tests/integration/test_recipes.py's smoke run); twins whose masks
differ fail it."""
import pytest

from common import catalog
from common.analysis import attention, device
from common.analysis.aggregate import parity, parity_failure
from common.runners import launch

from conftest import REPO, comparison_of, run_module

FLAGS = ["--device", "cpu", "--smoke", "--data", "synthetic"]
A100 = {"COOKBOOK_DEVICE_PROFILE": "A100"}


def test_on_a_cpu_flex_attention_is_not_applicable_and_nothing_is_timed(tmp_path):
    proc = run_module("common.runners.compare", "flex_attention", *FLAGS, "--reports-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "flex_attention: not applicable on CPU" in proc.stdout and "its backward runs on a GPU only" in proc.stdout
    assert {p.name for p in tmp_path.glob("results/flex_attention/*/*.json")} == {"comparison.json"}
    for name, lacks in (("P100", True), ("T4", False), ("A100", False), ("H100", False)):
        assert (catalog.not_applicable("flex_attention", device.SIMULATED[name]) is not None) == lacks, name


@pytest.mark.recipe("flex_attention")
def test_under_a_simulated_a100_the_twins_keep_parity_and_the_report_names_flexattention(smoke_run):
    proc, reports = smoke_run("flex_attention")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = comparison_of(reports, "flex_attention")["workloads"]["gpt"]
    assert entry["slow"]["env"]["profile"]["name"] == "NVIDIA A100-SXM4-40GB" and entry["parity"]["ok"]
    report = (reports / "flex_attention.md").read_text()
    assert f"Attention (fast): {attention.FLEX_UNCOMPILED}" in report, report
    # the counted step ran FlexAttention (FlopCounterMode has no rule of its own for it: common.measure.flex_flops)
    assert entry["fast"]["flops_per_step"] > 0


def _run(module, out, cwd=REPO):
    # a planted twin, run from its folder, is no recipe's: the recipe's smoke window given to all three
    outcome = launch.child(["-m", module], [*FLAGS, "--profile-steps", "0", "--window", "8"], out, cwd=cwd,
                           timeout=300, extra_env=A100)
    assert outcome.kind == "ok", "\n".join(outcome.tail)
    return outcome.result


def test_a_twin_whose_mask_sees_the_future_or_another_window_fails_parity(tmp_path):
    fast = catalog.script("flex_attention", "gpt", "fast").read_text()
    rule = "(q >= k) & (q - k < window)"
    assert rule in fast, "flex_attention/gpt_fast.py no longer says its mask this way"
    (tmp_path / "gpt_future.py").write_text(fast.replace(rule, "(q - k < window)"))  # every later key too
    (tmp_path / "gpt_wider.py").write_text(fast.replace("window = gpt.window(run)", "window = gpt.window(run) + 4"))
    rule = catalog.parity_rule("flex_attention", "gpt")
    slow = _run("recipes.flex_attention.gpt_slow", tmp_path / "slow.json")
    future = _run("gpt_future", tmp_path / "future.json", cwd=tmp_path)
    assert parity_failure(parity(slow, future, rule)) == ("the twins' models differ in `causal`: True (slow), "
                                                          "False (fast)")
    wider = _run("gpt_wider", tmp_path / "wider.json", cwd=tmp_path)
    assert wider.extra["window"] == slow.extra["window"]  # the flag's window, recorded; its mask is wider
    assert parity_failure(parity(slow, wider, rule)) == "the twins' models differ in `reach`: 8 (slow), 12 (fast)"
