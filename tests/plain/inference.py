"""A plain inference script: no optimizer, so the doctor needs --step forward to know its step."""
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)).eval()
loader = DataLoader(TensorDataset(torch.randn(65_536, 64)), batch_size=32)
with torch.no_grad():
    predictions = [model(x).argmax(1) for (x,) in loader]
print(f"{sum(p.numel() for p in predictions)} predictions")
