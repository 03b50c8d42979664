"""The recipes' techniques as units, in this process: the helpers and data plumbing that keep each
pair's twins comparable (tests/integration/test_recipes.py runs the pairs themselves)."""
import pytest
import torch
from torch.utils.data import TensorDataset

from common import data, graphs
from common.measure import trainstate
from common.workloads import resnet18
from common.workloads.device_batches import DeviceBatches

WORKLOADS = ("churn", "resnet18")



def test_the_device_pipeline_makes_nhwc_batches_when_asked():
    run = type("Run", (), {"data": "synthetic", "batch_size": 4, "image_size": 32, "device": torch.device("cpu"),
                           "generator": torch.Generator().manual_seed(0),
                           "record_data_source": lambda self, source: None})()
    images, _ = next(iter(resnet18.train_batches(run, channels_last=True)))
    assert images.is_contiguous(memory_format=torch.channels_last) and images.shape == (4, 3, 32, 32)
    images, _ = next(iter(resnet18.train_batches(run)))
    assert images.is_contiguous()


def test_batchnorm_statistics_are_updated_once_per_step():
    """The fast twin's checkpointing (selective, per stage, BatchNorm's statistics kept during the
    recomputation) after 3 steps leaves every buffer as training without checkpointing does; plain
    checkpointing would have counted each step twice (PyTorch issue 96136)."""
    import copy
    import functools

    import torch
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from common.workloads import resnet18

    torch.manual_seed(0)
    plain = resnet18.stages()
    checkpointed = copy.deepcopy(plain)
    policy = _fast_twin_policy()

    def contexts(stage):
        forward, recompute = create_selective_checkpoint_contexts(policy)
        return forward, resnet18.batchnorm_stats_kept(stage, recompute)

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


def test_the_optimizer_state_is_put_back_after_the_warm_up():
    """What capture() does before recording, checked without a GPU: a fresh Adam's state after the
    warm-up steps is zeros again and the weights are the ones before the warm-up."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    saved = trainstate.optimizer_state(optimizer)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
    assert not torch.equal(model.weight, before["weight"])
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(before[name])
    trainstate.restore_optimizer(optimizer, saved)
    assert torch.equal(model.weight, before["weight"])
    for state in optimizer.state.values():
        assert all(torch.count_nonzero(v) == 0 for v in state.values() if torch.is_tensor(v))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_a_captured_step_trains_like_the_eager_one():
    torch.manual_seed(0)
    eager = torch.nn.Linear(8, 1).cuda()
    graphed = torch.nn.Linear(8, 1).cuda()
    graphed.load_state_dict(eager.state_dict())
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-2)
    opt_g = torch.optim.Adam(graphed.parameters(), lr=1e-2, capturable=True)
    x = torch.zeros(16, 8, device="cuda")

    def step():
        opt_g.zero_grad(set_to_none=False)
        loss = graphed(x).pow(2).mean()
        loss.backward()
        opt_g.step()
        return loss

    graph, out = graphs.capture(step, graphed, opt_g)
    for _ in range(5):
        batch = torch.randn(16, 8, device="cuda")
        x.copy_(batch)
        got = graphs.replay(graph, out)
        opt_e.zero_grad()
        want = eager(batch).pow(2).mean()
        want.backward()
        opt_e.step()
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


def test_loader_batches_match_device_batches():
    features, targets = torch.arange(40.0).view(20, 2), torch.arange(20)
    run = type("Run", (), {"batch_size": 6, "seed": 0, "generator": torch.Generator().manual_seed(3)})()
    from_loader = iter(data.loader(run, TensorDataset(features, targets)))
    from_device = iter(DeviceBatches((features, targets), 6, torch.Generator().manual_seed(3)))
    for _ in range(7):  # past the end of an epoch (3 batches each)
        (a, b), (c, d) = next(from_loader), next(from_device)
        assert torch.equal(a, c) and torch.equal(b, d)


def test_seeded_augmentation_is_the_same_in_any_process_and_new_each_epoch():
    images = [(torch.rand(3, 8, 8), 1) for _ in range(4)]
    augment = lambda x: x * torch.rand(1)  # noqa: E731
    ds = resnet18.SeededAugmentation(images, augment, seed=0)
    first = ds[(0, 2)][0]
    torch.rand(5)  # whatever the process drew in between
    assert torch.equal(first, ds[(0, 2)][0])
    assert not torch.equal(first, ds[(1, 2)][0])  # next epoch, another crop
    before = torch.get_rng_state()
    ds[(0, 3)]
    assert torch.equal(before, torch.get_rng_state())  # the process's own RNG is left alone


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
