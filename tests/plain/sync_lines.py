"""A plain training script with host reads in three places: its loss read every step, a read under a
flag it is not given, and a validation after training. Only the first runs in the step."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
args = parser.parse_args()
x, y = torch.randn(64, 32), torch.randn(64, 1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
running = 0.0
for _ in range(3000):
    index = torch.randint(0, 64, (1,))
    rows = slice(int(index), int(index) + 32)  # a CPU tensor as an index: no device to wait for
    loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running += loss.item()  # the read every step
    if args.distributed:
        print(loss.item())  # never runs here


def validate():
    with torch.no_grad():
        return sum(torch.nn.functional.mse_loss(model(x), y).item() for _ in range(3))


print(validate())
