"""A plain training loop with no DataLoader (its batches made in the loop) that reads its loss on the
host every 10th step, as a logging loop does."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(10_000):
    x, y = torch.randn(32, 64), torch.randn(32, 1)  # made here: no DataLoader
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.3f}")  # the read every 10th step
