"""A plain training script whose step runs through a closure, as Lightning's automatic optimization
and LBFGS do: `optimizer.step(closure)` runs the forward, the backward and the gradient clipping
(foreach ops) inside the step."""
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
x, y = torch.randn(256, 16), torch.randn(256, 1)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    return loss


for _ in range(400):
    optimizer.step(closure)
print("done")
