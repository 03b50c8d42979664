"""The learning probe's side trip: the training state saved, the probe's steps taken, the state put
back into the same tensors, and training goes on exactly as if the probe had not run."""
import torch

from common.measure import trainstate


def _train(probe: bool, optimizer_kind=torch.optim.Adam):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))
    optimizer = optimizer_kind(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)) for _ in range(5)]
    seen = trainstate.Stepped()

    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=False)  # gradients kept between steps: they must come back too
        loss.backward()
        optimizer.step()
        return loss.item()

    losses = [step(*batches[0])]
    addresses = [p.data_ptr() for p in model.parameters()]
    if probe:
        saved = trainstate.save(seen)
        probe_losses = [step(*batches[4]) for _ in range(12)]
        assert probe_losses[-1] < probe_losses[0] / 2  # the probe did train
        trainstate.restore(saved)
    losses += [step(*batches[i]) for i in (1, 2, 3)]
    seen.close()
    assert [p.data_ptr() for p in model.parameters()] == addresses  # written back in place
    return losses


def test_training_goes_on_after_the_probe_exactly_as_without_it():
    for kind in (torch.optim.Adam, torch.optim.SGD):
        assert _train(probe=True, optimizer_kind=kind) == _train(probe=False, optimizer_kind=kind)


def test_only_optimizers_that_stepped_are_seen_and_a_closed_watch_sees_no_more():
    a = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    b = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    seen = trainstate.Stepped()
    a.step()
    assert list(seen) == [a]
    seen.close()
    b.step()
    assert list(seen) == [a]
