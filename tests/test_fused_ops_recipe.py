"""`make recipe-fused_ops` in smoke mode: the same losses, far fewer optimizer ops."""
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


def test_folded_ops_leave_the_forward(smoke_run):
    """The churn forward loses the add, the multiply and the unread mean: 3 ops fewer per step."""
    _, reports = smoke_run("fused_ops")
    churn = comparison_of(reports, "fused_ops")["workloads"]["churn"]
    slow = churn["slow"]["evidence"]["phases"]["forward"]["ops"]
    fast = churn["fast"]["evidence"]["phases"]["forward"]["ops"]
    assert slow - fast >= 3, (slow, fast)
