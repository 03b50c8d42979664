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


def test_checkpointing_recomputes_what_it_drops(smoke_run):
    """FlopCounterMode over one training step. Churn checkpoints whole segments, so its forward runs
    twice: a training step is about 3 forwards' worth (the backward costs two), +20-40%. ResNet-18
    saves its convolutions' outputs and recomputes only BatchNorm, ReLU and pooling, which count
    almost no FLOPs: its cost is memory traffic, not arithmetic."""
    _, reports = smoke_run("checkpointing")
    workloads = comparison_of(reports, "checkpointing")["workloads"]
    ratio = {w: e["fast"]["flops_per_step"] / e["slow"]["flops_per_step"] for w, e in workloads.items()}
    assert 1.2 < ratio["churn"] < 1.4 and 1.0 <= ratio["resnet18"] < 1.05, ratio


def test_batchnorm_statistics_are_updated_once_per_step():
    """The fast twin's checkpointing (selective, per stage, BatchNorm's statistics kept during the
    recomputation) after 3 steps leaves every buffer as training without checkpointing does; plain
    checkpointing would have counted each step twice (PyTorch issue 96136)."""
    import copy
    import functools

    import torch
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from common import models

    torch.manual_seed(0)
    plain = models.resnet18_stages()
    checkpointed = copy.deepcopy(plain)
    policy = _fast_twin_policy()

    def contexts(stage):
        forward, recompute = create_selective_checkpoint_contexts(policy)
        return forward, models.batchnorm_stats_kept(stage, recompute)

    for _ in range(3):
        x = torch.randn(2, 3, 32, 32)
        plain(x).sum().backward()
        out = x
        for stage in checkpointed:
            out = checkpoint(stage, out, use_reentrant=False, context_fn=functools.partial(contexts, stage))
        out.sum().backward()
    for (name, a), (_, b) in zip(plain.named_buffers(), checkpointed.named_buffers()):
        torch.testing.assert_close(a, b, msg=name)
    assert int(checkpointed[0][1].num_batches_tracked) == 3


def _fast_twin_policy():
    """The policy function of recipes/checkpointing/resnet18_fast.py, read from its source."""
    import ast

    from common import catalog

    source = catalog.script("checkpointing", "resnet18", "fast").read_text()
    tree = ast.parse(source)
    keep = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "KEEP")
    policy = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "policy")
    module = ast.parse("import torch\nfrom torch.utils.checkpoint import CheckpointPolicy")
    module.body += [keep, policy]
    namespace = {}
    exec(compile(module, "policy", "exec"), namespace)  # the recipe's own lines, not a copy
    return namespace["policy"]


def test_the_memory_budget_needs_cuda_and_the_report_says_so(smoke_run):
    _, reports = smoke_run("checkpointing")
    budget = comparison_of(reports, "checkpointing")["budget"]
    assert budget["pair"] == "resnet18" and budget["budget_gb"] == 16
    assert "needs CUDA" in budget["note"] or "smoke" in budget["note"]
    assert "## Under a memory budget" in (reports / "checkpointing.md").read_text()


def test_the_budget_search_bisects_to_the_largest_batch(monkeypatch, tmp_path):
    """With a stand-in probe that trains up to batch 700: doubling 64..1024, then bisecting."""
    from common.runners import budget, launch

    def child(target, flags, out, cpus=None, **kw):
        batch = int(flags[flags.index("--batch-size") + 1])
        return launch.Outcome("ok" if batch <= 700 else "oom", None, 0.1, out, 0, [])

    monkeypatch.setattr(launch, "child", child)
    found = budget.search("recipes.x", [], tmp_path, None, 64, progress=lambda line: None)
    assert found.fits <= 700 < found.fails and found.fails - found.fits <= found.fits // 16
    assert [b for b, _ in found.probes][:5] == [64, 128, 256, 512, 1024]
