"""The GPT workload: tokens are its samples, its FLOPs per token count attention, and the attention pair's
parity catches what breaks a transformer (a fast twin that sees the future)."""
import dataclasses

import pytest

from common import catalog
from common.analysis.aggregate import parity, parity_failure
from common.runners import launch

from conftest import REPO, run_module

FLAGS = ["--device", "cpu", "--smoke", "--data", "synthetic", "--profile-steps", "0"]


def _run(module, out, cwd=REPO):
    outcome = launch.child(["-m", module], FLAGS, out, cwd=cwd, timeout=300)
    assert outcome.kind == "ok", "\n".join(outcome.tail)
    return outcome.result


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The attention pair's slow and fast twins, and the fast one with its causal mask taken away."""
    folder = tmp_path_factory.mktemp("gpt")
    fast = catalog.script("attention", "gpt", "fast").read_text()
    assert "is_causal=True" in fast, "attention/gpt_fast.py no longer passes is_causal=True"
    (folder / "gpt_unmasked.py").write_text(fast.replace("is_causal=True", "is_causal=False"))
    return {"slow": _run("recipes.attention.gpt_slow", folder / "slow.json"),
            "fast": _run("recipes.attention.gpt_fast", folder / "fast.json"),
            "unmasked": _run("gpt_unmasked", folder / "unmasked.json", cwd=folder)}


def test_a_step_counts_its_tokens_and_its_flops_count_attention(twins):
    slow = twins["slow"]
    sizes = slow.config.sizes
    assert slow.config.row_samples == sizes["context"]
    assert slow.config.samples_per_step == slow.config.batch_size * sizes["context"]
    summary = slow.timing.summary
    assert summary.throughput_per_s == pytest.approx(slow.config.samples_per_step * 1000 / summary.mean_ms, rel=1e-6)
    flops = slow.extra["flops_per_token"]
    assert flops["attention"] == 12 * sizes["layers"] * sizes["context"] * sizes["width"]
    assert flops["total"] == flops["dense"] + flops["attention"] and flops["dense"] == 6 * flops["weights"]


def test_the_fused_twin_passes_parity_and_one_that_sees_the_future_fails_it(twins):
    rule = catalog.parity_rule("attention", "gpt")
    good = parity(twins["slow"], twins["fast"], rule)
    assert good.ok, parity_failure(good)
    bad = parity(twins["slow"], twins["unmasked"], rule)
    assert not bad.ok, f"a twin without its causal mask passed parity: {bad}"
    assert parity_failure(bad) == "the twins' models differ in `causal`: True (slow), False (fast)"
    # its losses alone pass at this size: the model has not yet learnt to read the next token
    assert parity(twins["slow"], twins["unmasked"], {**rule, "same": ()}).ok
    silent = dataclasses.replace(twins["fast"], extra={})  # a twin whose model never said: no agreement assumed
    assert parity_failure(parity(twins["slow"], silent, rule)).startswith("the fast twin recorded no `causal`")
    # twins that both see the future agree with each other, and are both wrong
    both = [dataclasses.replace(twins[v], extra={**twins[v].extra, "causal": False}) for v in ("slow", "fast")]
    assert parity_failure(parity(*both, rule)) == "both twins' models have `causal` False, not True"


@pytest.mark.parametrize("module", ["recipes.attention.gpt_fast", "recipes.flex_attention.gpt_fast"])
def test_a_t4_trains_the_gpt_in_fp32(tmp_path, module):
    """The twins' `enabled=run.profile.amp_dtype == "bfloat16"`: a T4 (sm_75) has no bf16, so its matmuls
    stay fp32 and no GradScaler is needed (a CPU and an sm_80+ GPU autocast them to bf16). FlexAttention's
    twin too, which a T4 runs (Triton, sm_75) and a CPU does not (common.measure.rig stands in)."""
    outcome = launch.child(["-m", module], ["--device", "cpu", "--smoke", "--data", "synthetic"],
                           tmp_path / "t4.json", cwd=REPO, timeout=300, extra_env={"COOKBOOK_DEVICE_PROFILE": "T4"})
    assert outcome.kind == "ok", "\n".join(outcome.tail)
    dtypes = {o.dtype for o in outcome.result.evidence.roofline.ops if "mm" in o.name}
    assert outcome.result.env.profile.name == "Tesla T4" and dtypes == {"float32"}, dtypes


@pytest.mark.parametrize("module, flags, error", [
    ("recipes.attention.gpt_fast", ["--window", "8"],
     "--window 8: this recipe's attention sees the whole context (32 tokens); the flex_attention recipe's twins "
     "read --window"),
    ("recipes.flex_attention.gpt_slow", ["--window", "64"], "--window 64 is longer than the context (32 tokens)"),
    ("recipes.attention.gpt_slow", ["--heads", "3"], "--heads 3 does not divide --width 32"),
])
def test_a_size_the_gpt_cannot_take_is_one_line_and_exit_2_with_nothing_written(tmp_path, module, flags, error):
    out = tmp_path / "result.json"
    proc = run_module(module, *FLAGS, *flags, "--out", str(out), env={"COOKBOOK_DEVICE_PROFILE": "A100"})
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(f"error: {error}"), proc.stderr
    assert not out.exists() and not any(tmp_path.iterdir())
