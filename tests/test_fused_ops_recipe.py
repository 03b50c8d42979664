"""`make recipe-fused_ops` in smoke mode: the same losses, far fewer optimizer ops, and nothing else changed."""
from conftest import comparison_of

WORKLOADS = ("churn", "resnet18")


def test_fused_ops_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("fused_ops")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "fused_ops")
    for w in WORKLOADS:
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-3, (w, par)


def test_multi_tensor_adam_calls_far_fewer_ops(smoke_run):
    """The for-loop Adam calls about 9 ops per parameter tensor (12 in the MLP, 62 in ResNet-18);
    the multi-tensor one a few per step for all of them (plus its scalar bookkeeping)."""
    _, reports = smoke_run("fused_ops")
    comparison = comparison_of(reports, "fused_ops")
    for w, tensors in (("churn", 12), ("resnet18", 62)):
        slow = comparison["workloads"][w]["slow"]["evidence"]["phases"]["optimizer"]["ops"]
        fast = comparison["workloads"][w]["fast"]["evidence"]["phases"]["optimizer"]["ops"]
        assert slow >= 8 * tensors and fast < slow / 2, (w, slow, fast)


def test_the_pair_changes_the_optimizer_only():
    """One technique per pair: the fused_ops twins differ in the Adam line alone (the folded ops and
    set_to_none have their own recipes)."""
    import difflib

    from common import catalog

    for w in WORKLOADS:
        slow = catalog.script("fused_ops", w, "slow").read_text().split('"""', 2)[2].splitlines()
        fast = catalog.script("fused_ops", w, "fast").read_text().split('"""', 2)[2].splitlines()
        changed = [line[2:] for line in difflib.ndiff(slow, fast) if line[:2] in ("- ", "+ ")]
        assert all("optim" in line or "fused" in line for line in changed), changed
