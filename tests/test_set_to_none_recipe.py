"""`make recipe-set_to_none` in smoke mode: the same losses, no fill op per gradient."""
from conftest import comparison_of

WORKLOADS = ("churn", "resnet18")


def test_set_to_none_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("set_to_none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w in WORKLOADS:
        par = comparison_of(reports, "set_to_none")["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6, (w, par)  # zero + gradient == gradient


def test_the_zeroing_ops_are_gone(smoke_run):
    """zero_grad(set_to_none=False) zeroes every gradient in place (12 tensors in the MLP, 62 in
    ResNet-18); the fast twin runs none of it, so the step calls fewer ops."""
    _, reports = smoke_run("set_to_none")
    for w in WORKLOADS:
        entry = comparison_of(reports, "set_to_none")["workloads"][w]
        slow, fast = entry["slow"]["evidence"]["ops_per_step"], entry["fast"]["evidence"]["ops_per_step"]
        assert slow > fast, (w, slow, fast)
