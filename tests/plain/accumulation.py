"""A plain training script that accumulates gradients over 4 DataLoader batches per optimizer step."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1)), batch_size=8, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
for _epoch in range(100):
    for i, (x, y) in enumerate(loader):
        (torch.nn.functional.mse_loss(model(x), y) / 4).backward()
        if i % 4 == 3:
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
