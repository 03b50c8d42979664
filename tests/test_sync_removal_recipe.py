"""`make recipe-sync_removal` in smoke mode: the same losses, and the per-step reads are gone."""
from conftest import comparison_of

WORKLOADS = ("churn", "resnet18")


def test_sync_removal_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("sync_removal")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "sync_removal")
    for w in WORKLOADS:
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6  # when the host reads a number changes nothing else


def test_host_reads_per_step_drop_to_zero(smoke_run):
    """The slow twins read two numbers per step (churn: the forward's mean and the loss; ResNet-18:
    the loss and the correct count); the fast twins read none inside the step."""
    _, reports = smoke_run("sync_removal")
    comparison = comparison_of(reports, "sync_removal")
    for w in WORKLOADS:
        slow = comparison["workloads"][w]["slow"]["evidence"]["syncs_per_step"]
        fast = comparison["workloads"][w]["fast"]["evidence"]["syncs_per_step"]
        assert (slow, fast) == (2.0, 0.0), (w, slow, fast)
    md = (reports / "sync_removal.md").read_text()
    assert md.count("**Mechanism: .item() calls per step (CPU proxy for syncs)**: 2.0 (slow) -> 0.0 (fast)") == 2
