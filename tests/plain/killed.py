"""A plain training script ended by SIGKILL at its fourth step, as the kernel's out-of-memory killer
ends a process that filled the host's memory (no exception: the process is gone)."""
import os
import signal

import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    if step == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
