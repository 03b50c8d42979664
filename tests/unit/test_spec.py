"""A recipe's spec (common.spec): one typed place, checked once, read by every runner."""
import re

import pytest

from common import catalog, spec
from common.errors import CookbookError

from conftest import REPO


def test_every_recipe_exports_a_spec_that_checks():
    for recipe in catalog.available():
        s = catalog.spec(recipe)
        assert isinstance(s, spec.RecipeSpec) and s.title
        for pair in catalog.workloads(recipe):
            rule = s.parity_rule(pair)
            assert "atol" in rule or {"early_steps", "early_rtol", "window", "rtol"} <= set(rule), (recipe, pair)


@pytest.mark.parametrize("change, words", [
    ({"main": "nope"}, "RECIPE.main 'nope' is none of its pairs (churn, resnet18, gpt)"),
    ({"main": None}, "RECIPE.main is missing: it has 3 pairs"),
    ({"measure": "epoch"}, "RECIPE.measure 'epoch' is none of step, first step"),
    ({"defaults": {"resnet18": {"tpu": {}}}}, "RECIPE.defaults['resnet18'] has modes ['tpu']"),
    ({"sweep": spec.Sweep(pair="mlp", flag="--batch-size", knob="batch", values={})},
     "RECIPE.sweep.pair names 'mlp', none of its pairs"),
    ({"parity": {"rtol": 0.1}}, "RECIPE.parity is neither LossParity nor AnswerParity"),
    ({"goals": {"A100": {}}}, "RECIPE.goals names the GPU class 'A100', none of H100, T4"),
    ({"goals": {"T4": {"resnet18": {"min_speed": 2}}}}, "RECIPE.goals['T4']['resnet18'] has keys ['min_speed']"),
    ({"cures": {"disk": 1}}, "RECIPE.cures names ['disk']"),
    ({"parity_by_pair": {"gpt": spec.LossParity("loss", 3, 0.02, 5, 0.03, expect={"causal": True})}},
     "RECIPE.parity_by_pair['gpt'].expect names ['causal'], not in its same"),
])
def test_a_wrong_field_is_one_line_naming_the_recipe_and_the_field(change, words):
    import dataclasses

    good = catalog.spec("amp")
    bad = dataclasses.replace(good, **change)
    with pytest.raises(CookbookError, match=re.escape(f"recipes/amp/__init__.py: {words}")):
        spec.check("amp", bad, catalog.workloads("amp"))


def test_no_runner_reads_a_recipe_module_by_name():
    """Every read goes through catalog.spec: no getattr on a recipe's settings module remains."""
    found = []
    for folder in ("common", "ladder"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text()
            if re.search(r"getattr\((settings|catalog\.settings)|catalog\.settings\(|script_settings", text):
                found.append(str(path.relative_to(REPO)))
    assert found == []


def test_the_tables_a_technique_appears_in_are_read_from_its_spec():
    """The goals, the diagnosis's cures and the host-bound fixes: one place each, the recipes' specs."""
    from common.analysis import diagnosis, goals
    from common.render import report

    assert goals.goal_of("amp", "resnet18", "T4") == catalog.spec("amp").goals["T4"]["resnet18"]
    assert diagnosis.RECIPES["launch overhead"] == ["cuda_graphs", "compile", "fused_ops"]
    assert report.HOST_FIXES == ("cuda_graphs", "compile", "fused_ops", "folded_ops", "set_to_none")
