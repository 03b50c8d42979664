"""`make recipe-folded_ops` in smoke mode: the same losses, three ops fewer in every forward."""
from conftest import comparison_of


def test_folded_ops_pair_passes_parity_exactly(smoke_run):
    proc, reports = smoke_run("folded_ops")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    par = comparison_of(reports, "folded_ops")["workloads"]["churn"]["parity"]
    assert par["ok"] and par["early_max_rel"] <= 1e-6  # the folded data are the same numbers


def test_folded_ops_leave_the_forward(smoke_run):
    """The churn forward loses the add, the multiply and the unread mean: 3 ops fewer per step."""
    _, reports = smoke_run("folded_ops")
    churn = comparison_of(reports, "folded_ops")["workloads"]["churn"]
    slow = churn["slow"]["evidence"]["phases"]["forward"]["ops"]
    fast = churn["fast"]["evidence"]["phases"]["forward"]["ops"]
    assert slow - fast >= 3, (slow, fast)
