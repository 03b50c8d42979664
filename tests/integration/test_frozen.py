"""A broken twin fails parity in every recipe: a training pair's fast twin planted to update nothing
(faults.frozen). Apart from tests/integration/test_parity.py, whose tests share one worker for its module fixture:
these runs need no fixture and spread over the workers."""
import pytest

from common import catalog

# One training pair per recipe, its fast twin planted to update nothing (faults.frozen): the cheapest
# pair where the recipe has a choice. The one-option DDP recipes share one rule (recipes.ddp.ONE_OPTION_PARITY)
# and one launch, so one of them stands for the four (checked below); grad_accumulation and cuda_graphs
# compare no single steps, so the probe alone must catch them, on both of grad_accumulation's workloads.
FROZEN = [(r, pair) for r in catalog.available() for pair in catalog.spec(r).frozen]  # each recipe's spec says
SAME_RULE_AS = {"ddp_bucket_view": "ddp_buckets", "ddp_static_graph": "ddp_buckets", "ddp_unused": "ddp_buckets"}


def test_every_recipe_with_a_training_pair_has_its_planted_frozen_twin():
    training = {r for r in catalog.stepped() for w in catalog.workloads(r) if "serving" not in w}
    # elsewhere: amp's stalled twin in tests/integration/test_parity.py (the same fault, at every size);
    # compile's beside its smoke run (tests/integration/test_recipes.py); ddp's in its run across two nodes
    # (tests/integration/test_nodes.py)
    # cold_start's pairs compile the training step of compile's resnet18_fusion pair and judge it by compile's rule
    covered = {r for r, _ in FROZEN} | {"amp", "compile", "ddp", "cold_start"}
    assert training == covered | set(SAME_RULE_AS), training ^ (covered | set(SAME_RULE_AS))
    assert catalog.spec("cold_start").parity == catalog.spec("compile").parity
    for recipe, stand_in in SAME_RULE_AS.items():
        assert catalog.spec(recipe).parity is catalog.spec(stand_in).parity
        assert catalog.workloads(recipe) == catalog.workloads(stand_in) == ["resnet18"]


@pytest.mark.parametrize("recipe, workload", FROZEN)
def test_a_planted_twin_whose_steps_update_nothing_fails_parity_in_every_recipe(tmp_path, recipe, workload):
    """A fast twin that has lost its optimizer step fails parity: at once where single steps are
    compared, and where they are not (micro-batch statistics, a graph's dropout masks differ between
    the twins) on the learning probe, loosened there but never dropped, with its check that the twin
    cuts its own loss. (compile's runs beside its smoke run: tests/integration/test_recipes.py.)"""
    frozen_fails(tmp_path, recipe, workload)


def frozen_fails(tmp_path, recipe, workload):
    from conftest import comparison_of, run_module, simulated_for

    proc = run_module("common.runners.compare", recipe, "--workloads", workload, "--smoke", "--device", "cpu",
                      "--data", "synthetic", "--reports-dir", str(tmp_path),
                      "--", "--profile-steps", "0",  # parity only: no evidence
                      env={"COOKBOOK_FAULT": "frozen:fast", **(simulated_for(recipe) or {})})
    assert proc.returncode == 1 and f"parity FAILED for {recipe}/{workload}" in proc.stderr, proc.stderr
    par = comparison_of(tmp_path, recipe)["workloads"][workload]["parity"]
    assert not par["ok"]
    if not par["early_steps"]:  # windows only: the probe must be what caught it
        assert par["probe_fast_drop"] < 0.1 < par["probe_drop"]
