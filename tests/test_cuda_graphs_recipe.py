"""`make recipe-cuda_graphs` in smoke mode (CPU: the fast twins run their step eagerly, with a
notice), and the capture helper's promise: the graphed twin starts from the same state."""
import pytest
import torch

from common import graphs

from conftest import comparison_of


def test_cuda_graphs_pairs_pass_parity_and_say_a_cpu_cannot_graph(smoke_run):
    proc, reports = smoke_run("cuda_graphs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "cuda_graphs")["workloads"]
    assert set(workloads) == {"churn", "churn_serving"}
    for pair, entry in workloads.items():
        assert entry["parity"]["ok"], (pair, entry["parity"])
    serving = workloads["churn_serving"]["parity"]
    assert serving["what"] == "mean churn probability per served batch" and serving["early_max_rel"] <= 1e-6
    assert "CUDA graphs need CUDA" in " ".join(workloads["churn"]["fast"]["notices"])
    md = (reports / "cuda_graphs.md").read_text()
    assert "## churn_serving" in md and "[side by side](cuda_graphs_churn_serving_diff.html)" in md


def test_the_optimizer_state_is_put_back_after_the_warm_up():
    """What capture() does before recording, checked without a GPU: a fresh Adam's state after the
    warm-up steps is zeros again and the weights are the ones before the warm-up."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    saved = optimizer.state_dict()
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
    assert not torch.equal(model.weight, before["weight"])
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(before[name])
        graphs._reset_optimizer(optimizer, saved)
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
