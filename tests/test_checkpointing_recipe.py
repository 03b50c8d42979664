"""`make recipe-checkpointing` in smoke mode: parity holds and the recomputation shows in the FLOPs."""
from conftest import comparison_of

WORKLOADS = ("churn", "resnet18")


def test_checkpointing_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("checkpointing")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "checkpointing")
    for w in WORKLOADS:
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 0.001  # the same arithmetic, replayed
    md = (reports / "checkpointing.md").read_text()
    assert md.count("**GFLOP per step (FlopCounterMode)**") == 2 and "checkpoint" in md


def test_checkpointing_recomputes_the_forward(smoke_run):
    """FlopCounterMode over one training step: the fast twin runs the checkpointed forward twice.
    A training step is about 3 forwards' worth (forward + backward at twice the cost), so recomputing
    nearly all of the forward adds about a third."""
    _, reports = smoke_run("checkpointing")
    comparison = comparison_of(reports, "checkpointing")
    for w in WORKLOADS:
        slow = comparison["workloads"][w]["slow"]["flops_per_step"]
        fast = comparison["workloads"][w]["fast"]["flops_per_step"]
        assert 1.2 * slow < fast < 1.4 * slow, (w, slow, fast)
