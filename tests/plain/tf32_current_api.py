"""A plain training script that turns TF32 on with torch's current API (fp32_precision, torch 2.9+)
and then reads it back, as torch's docs recommend: once it has, reading the legacy flags raises."""
import torch

torch.backends.cuda.matmul.fp32_precision = "tf32"
torch.backends.cudnn.conv.fp32_precision = "tf32"

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(400):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # the doctor's reads changed nothing
print("done")
