"""A plain training script whose own namespace never binds the name `torch` (`from torch import nn`),
as many framework scripts: torch.compile applied from outside must still work on it."""
from torch import nn, optim, randn

model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = optim.Adam(model.parameters(), lr=1e-3)
x, y = randn(64, 16), randn(64, 1)
for _ in range(400):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
