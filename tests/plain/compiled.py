"""A plain training script whose model is torch.compile'd: the doctor's hooks must not recompile it."""
import torch

torch.manual_seed(0)
x, y = torch.randn(64, 128), torch.randn(64, 1)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
cmodel = torch.compile(model, backend="eager")  # dynamo alone: its guards are what the hooks could trip
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(10_000):
    loss = torch.nn.functional.mse_loss(cmodel(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
