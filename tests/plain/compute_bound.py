"""A plain training script whose step is its compute: batches already in memory, a wide MLP."""
import torch

torch.manual_seed(0)
batches = [(torch.randn(128, 1024), torch.randint(0, 10, (128,))) for _ in range(8)]
model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                            torch.nn.ReLU(), torch.nn.Linear(2048, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
criterion = torch.nn.CrossEntropyLoss()
for step in range(10_000):
    x, y = batches[step % len(batches)]
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
