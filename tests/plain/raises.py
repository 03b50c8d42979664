"""A plain training script with a bug that shows at its fourth step."""
import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    width = 8 if step < 3 else 9  # the bug: a batch of the wrong width
    loss = model(torch.randn(4, width)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
