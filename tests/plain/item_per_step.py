"""A plain training script that reads its loss with .item() every step (on a GPU, a host sync each)."""
import torch

torch.manual_seed(0)
x, y = torch.randn(64, 256), torch.randn(64, 1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
running = 0.0
for _ in range(10_000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running += loss.item()  # the sync a GPU pays every step
